"""The seeds' numeric claims, each recomputed with the library (checks for ``conformance``).

Sections: seed 000 (the week-2 notes), 001 (the Annotated Transformer class), 002 (the exact
exercise), 004 (the decoder-block lesson). Each check yields ``Row``s via ``near``/``equal``.

Legend: B batch, T target length, S source length, d model width, h heads.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from decoderkit.nn.attention import MultiHeadAttention, attention
from decoderkit.nn.embeddings import Generator, PositionalEncoding, sinusoidal_encoding
from decoderkit.nn.ffn import PositionwiseFeedForward
from decoderkit.nn.layers import BlockSpec, Decoder, DecoderLayer
from decoderkit.nn.norms import AnnotatedLayerNorm, LayerNorm
from decoderkit.nn.masks import causal_mask, padding_mask
from decoderkit.nn.seq2seq.model import ModelConfig
from decoderkit.report.params import count_parameters, decoder_layer_parameters
from decoderkit.report.rows import Row, equal, near


def _scores_attention(scores: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Attention weights of a given (T, S) score matrix through ``attention()``.

    With d_k = S, query = sqrt(S) * scores and key = I give Q K^T / sqrt(d_k) = scores.
    """
    S = scores.size(-1)
    q = scores * math.sqrt(S)  # (T, S)
    k = torch.eye(S, dtype=scores.dtype)  # (S, S)
    return attention(q, k, k, mask)[1]  # (T, S)


# --- seed 000: the week-2 notes ---------------------------------------------------------
def seed000_attention() -> Iterator[Row]:
    """Masked softmax examples and the cross-attention shape example."""
    s = torch.tensor([[2.0, 1.0, 5.0, 3.0]], dtype=torch.float64)
    w = _scores_attention(s, torch.tensor([[True, True, False, False]]))[0]
    e = math.e
    yield near("000 §2", "scores (2,1,5,3), 2 visible -> weights", (0.7311, 0.2689, 0, 0),
               w, 5e-5)
    yield near("000 §2", "visible weight = e^2/(e^2+e) exactly", e * e / (e * e + e), w[0], 1e-15)
    scores = torch.tensor([[1.2, .5, 2.1, -.3], [.2, 1., .8, 1.1], [.4, -.2, 1.4, .7],
                           [.6, .3, -.1, 1.3]], dtype=torch.float64)
    w = _scores_attention(scores, causal_mask(4))
    table = [[1, 0, 0, 0], [.3100, .6900, 0, 0], [.2344, .1286, .6370, 0],
             [.2352, .1743, .1168, .4737]]
    yield near("000 §7.1", "causal example: 4x4 weight table", table, w, 5e-5)
    yield near("000 §7.1", "future (blocked) weight sum", 0.0, w.triu(1).sum(), 0.0)
    torch.manual_seed(42)
    mha = MultiHeadAttention(16, 4)
    y, a = mha(torch.randn(2, 3, 16), torch.randn(2, 5, 16), need_weights=True)
    yield equal("000 §7.2", "cross-attention weights [B,h,T_dec,T_enc]", [2, 4, 3, 5],
                list(a.shape))
    yield equal("000 §7.2", "cross-attention output [B,T_dec,d]", [2, 3, 16], list(y.shape))


def seed000_parameters() -> Iterator[Row]:
    """Parameter counts of the base decoder layer, six layers and the output layer."""
    with torch.device("meta"):  # counts only: no memory, no init cost
        layer = DecoderLayer(BlockSpec(512, 8, 2048))
        six = Decoder(BlockSpec(512, 8, 2048), n_layers=6)
        out = Generator(512, 37000)
        peer = nn.TransformerDecoderLayer(512, 8, 2048, batch_first=True)
    yield equal("000 §3", "self+cross attention, d=512",
                2_101_248, count_parameters(layer.self_attn) + count_parameters(layer.cross_attn))
    yield equal("000 §3", "FFN 2df+f+d, f=2048", 2_099_712, count_parameters(layer.ffn))
    norms = sum(count_parameters(r.norm) for r in (layer.res1, layer.res2, layer.res3))
    yield equal("000 §3", "three LayerNorms", 3_072, norms)
    yield equal("000 §3", "decoder layer (live module)", 4_204_032, count_parameters(layer))
    yield equal("000 §3", "decoder layer (closed form)", 4_204_032,
                decoder_layer_parameters(512, 2048))
    yield equal("000 §7.7", "nn.TransformerDecoderLayer count", 4_204_032,
                count_parameters(peer))
    yield equal("000 §3", "six decoder layers", 25_224_192, count_parameters(six))
    yield equal("000 §3", "output layer weight 512 x 37,000", 18_944_000, out.proj.weight.numel())
    yield equal("000 §3", "output layer bias", 37_000, out.proj.bias.numel())


def seed000_positions() -> Iterator[Row]:
    """Sinusoidal encoding identities, the offset rotation and the d=16 example."""
    d, k = 64, 7
    pe = sinusoidal_encoding(100, d, dtype=torch.float64)  # (100, d)
    yield equal("000 §4", "PE(0): even channels 0, odd channels 1", True,
                bool((pe[0, 0::2] == 0).all() and (pe[0, 1::2] == 1).all()))
    yield equal("000 §4", "every component in [-1, 1]", True, bool(pe.abs().max() <= 1))
    yield near("000 §4", "||PE(p)||^2 = d/2 for all p", d / 2, (pe ** 2).sum(1).max(), 1e-12)
    omega = 10000.0 ** (-np.arange(0, d, 2) / d)  # (d/2,)
    c, s = np.cos(k * omega), np.sin(k * omega)
    sin_p, cos_p = pe[:-k, 0::2].numpy(), pe[:-k, 1::2].numpy()  # (P, d/2)
    rot = np.empty_like(pe[k:].numpy())
    rot[:, 0::2] = c * sin_p + s * cos_p  # [[cos, sin], [-sin, cos]] per frequency pair
    rot[:, 1::2] = -s * sin_p + c * cos_p
    yield near("000 §4", f"offset {k} = block rotation of PE(p)", 0.0,
               np.abs(rot - pe[k:].numpy()).max(), 1e-12)
    dots = (pe[:-k] * pe[k:]).sum(1).numpy()
    yield near("000 §4", "PE(p).PE(p+k) = sum_i cos(k w_i)", np.full_like(dots, c.sum()), dots,
               1e-12)
    dist = ((pe[:-k] - pe[k:]) ** 2).sum(1).numpy()
    yield near("000 §4", "|PE(p)-PE(p+k)|^2 = 2 sum(1-cos)", np.full_like(dist, 2 * (1 - c).sum()),
               dist, 1e-12)
    by_k = ((pe[0] - pe[1:]) ** 2).sum(1)  # squared distance for offsets k = 1..99
    yield equal("000 §4", "distance not monotonic in offset", True, bool((by_k.diff() < 0).any()))
    p = np.arange(10)[:, None] * 10000.0 ** (-np.arange(0, 16, 2) / 16)
    ref = np.empty((10, 16))
    ref[:, 0::2], ref[:, 1::2] = np.sin(p), np.cos(p)
    ours = sinusoidal_encoding(10, 16).numpy()  # float32, as the seed's
    yield near("000 §7.3", "d=16: max |ours - formula| ~1e-7", 0.0, np.abs(ours - ref).max(), 2e-7)
    yield near("000 §7.3", "d=16, 10 positions: entry range", (-0.989992, 1.0),
               (ours.min(), ours.max()), 5e-7)


def seed000_norms() -> Iterator[Row]:
    """LayerNorm worked example and the LayerNorm/BatchNorm axes example."""
    ln = LayerNorm(3, eps=0.0).double()
    y = ln(torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64))
    r = math.sqrt(1.5)
    yield near("000 §5", "LN(1,2,3), eps 0 -> (-sqrt(3/2), 0, sqrt(3/2))", (-r, 0, r),
               y.detach(), 1e-15)
    x = torch.arange(1.0, 13.0).view(2, 2, 3)  # [B, T, d]
    out = LayerNorm(3)(x).detach()
    yield near("000 §7.4", "LN per-token means (2x2)", np.zeros((2, 2)), out.mean(-1), 1e-6)
    yield near("000 §7.4", "single token LN output", (-1.2247, 0, 1.2247), out[0, 0], 5e-5)
    bn = F.batch_norm(x.transpose(1, 2), None, None, training=True).transpose(1, 2)
    yield near("000 §7.4", "BatchNorm feature 0 (torch, [B,T])", [[-1.3416, -.4472],
               [.4472, 1.3416]], bn[:, :, 0], 5e-5)


def seed000_training() -> Iterator[Row]:
    """Label smoothing targets and loss, the warm-up schedule (needs ``decoderkit.training``)."""
    from decoderkit.training.objective import LabelSmoothingLoss, noam_rate

    for convention, gold in (("uniform", 0.92), ("exclusive", 0.9)):
        lp = torch.zeros(1, 5, dtype=torch.float64, requires_grad=True)
        LabelSmoothingLoss(0.1, convention, ignore_index=None)(lp, torch.tensor([2])).backward()
        q = -lp.grad[0]  # dL/dlog p_i = -q_i: the target the loss really uses
        others = 0.02 if convention == "uniform" else 0.025
        yield near("000 §6", f"V=5, eps 0.1, {convention}: q_y, q_other", (gold, others),
                   (q[2], q[0]), 1e-12)
    logits = torch.tensor([[0.2, -0.3, 1.4, 0.1]])
    loss = LabelSmoothingLoss(0.1, ignore_index=None)(logits.log_softmax(-1), torch.tensor([2]))
    yield near("000 §7.5", "4-class example loss", 0.66827178, loss, 5e-8)
    table = {512: (0.0000001747, 0.0001746928, 0.0006987712, 0.0004941059),
             256: (0.0000002471, 0.0002470529, 0.0009882118, 0.0006987712)}
    for d, rates in table.items():
        ours = [noam_rate(s, d) for s in (1, 1000, 4000, 8000)]
        yield near("000 §7.6", f"warm-up rates d={d}, steps 1/1k/4k/8k", rates, ours, 5e-11)
    yield near("000 §6", "d=512 peak at s=4000", 0.0006987712,
               max(noam_rate(s, 512) for s in range(3990, 4011)), 5e-11)
    yield near("000 §6", "rate(512) / rate(256) = 1/sqrt(2)", 1 / math.sqrt(2),
               noam_rate(6000, 512) / noam_rate(6000, 256), 1e-12)
    from decoderkit.training.objective import make_optimizer

    optimizer, scheduler = make_optimizer(nn.Linear(2, 2), d_model=512, warmup=4000)
    group = optimizer.param_groups[0]
    yield equal("000 §6", "Adam (beta1, beta2, eps)", (0.9, 0.98, 1e-9), (*group["betas"],
                                                                         group["eps"]))
    yield near("000 §6", "optimiser lr at its first step", 0.0000001747, group["lr"], 5e-11)
    yield equal("000 §6", "base dropout", 0.1, ModelConfig(8, 8).dropout)


def seed000_teacher_forcing() -> Iterator[Row]:
    """The teacher-forcing shift of a training batch (needs ``decoderkit.data``)."""
    from decoderkit.training.seq2seq.data import make_batch

    batch = make_batch([([7, 8], [1, 2, 3, 4])], pad_id=9, bos_id=0, eos_id=5)
    yield equal("000 §7.8", "gold [1,2,3,4], BOS 0: decoder input", [0, 1, 2, 3],
                batch.tgt_in[0, :4].tolist())
    yield equal("000 §2", "labels [y1..yT] (+ EOS to learn to stop)", [1, 2, 3, 4, 5],
                batch.labels[0].tolist())


# --- seed 001: the Annotated Transformer class ---------------------------------------------
def seed001() -> Iterator[Row]:
    """Pad id 2 masks, head split 512 = 8 x 64, the PE table, FFN widths, annotated LayerNorm."""
    src = torch.tensor([[5, 7, 9, 2, 2]])
    m = padding_mask(src, pad_id=2)
    yield equal("001", "source mask with pad id 2: (B,1,S)", [[[1, 1, 1, 0, 0]]],
                m.int().tolist())
    gen = torch.Generator().manual_seed(1)
    x, memory = torch.randn(1, 3, 16, generator=gen), torch.randn(1, 5, 16, generator=gen)
    _, w = MultiHeadAttention(16, 4)(x, memory, mask=m, need_weights=True)  # (B, h, T, S)
    yield equal("001", "(B,1,S) mask over (B,h,T,S): pad keys get 0", True,
                bool(w.shape == (1, 4, 3, 5) and (w[..., 3:] == 0).all()))
    mha = MultiHeadAttention(512, 8)
    yield equal("001", "512 features = 8 heads x 64", (8, 64), (mha.n_heads, mha.d_k))
    heads = mha.split_heads(torch.zeros(2, 3, 512))
    yield equal("001", "split heads (B,L,512) -> (B,h,L,d_k)", [2, 8, 3, 64], list(heads.shape))
    pe = PositionalEncoding(512)
    yield equal("001", "PE table: 5000 positions x d_model", [5000, 512], list(pe.pe.shape))
    yield equal("001", "sine/cosine pairs at d=512", 256, pe.pe[:, 0::2].size(1))
    ffn = PositionwiseFeedForward(512, 2048)
    yield equal("001", "FFN widths 512 -> 2048 -> 512", (512, 2048, 512),
                (ffn.w_1.in_features, ffn.w_1.out_features, ffn.w_2.out_features))
    x = torch.randn(4, 6, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    ref = x.numpy()
    ref = (ref - ref.mean(-1, keepdims=True)) / (ref.std(-1, ddof=1, keepdims=True) + 1e-6)
    got = AnnotatedLayerNorm(6).double()(x).detach()
    yield near("001", "annotated LN: unbiased std, eps 1e-6 on std", ref, got, 1e-12)


# --- seed 002: the exact exercise ---------------------------------------------------------
def _exercise_reference(X, E, g, b, W1, b1, W2, b2) -> np.ndarray:
    """Seed 002 re-derived in float64 NumPy: three pre-norm stages, literal -inf causal mask."""
    def ln(x, i):
        mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
        return g[i] * (x - mu) / np.sqrt(var + 1e-5) + b[i]

    def softmax(s):
        e = np.exp(s - s.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)

    T, D = X.shape
    H1 = ln(X, 0)
    s = H1 @ H1.T / np.sqrt(D)
    s[np.triu(np.ones((T, T), dtype=bool), 1)] = -np.inf
    X1 = X + softmax(s) @ H1
    H2 = ln(X1, 1)
    X2 = X1 + softmax(H2 @ E.T / np.sqrt(D)) @ E
    H3 = ln(X2, 2)
    return X2 + np.maximum(H3 @ W1 + b1, 0) @ W2 + b2


def seed002() -> Iterator[Row]:
    """``transformer_decoder`` against the float64 re-derivation, T > 1 and T = 1."""
    from decoderkit.nn.exercise import transformer_decoder

    gen = torch.Generator().manual_seed(2)
    for T in (5, 1):
        S, D, Fw = 3, 8, 12
        shapes = [(T, D), (S, D)] + [(D,)] * 6 + [(D, Fw), (Fw,), (Fw, D), (D,)]
        args = [torch.randn(s, generator=gen, dtype=torch.float64) for s in shapes]
        got = transformer_decoder(*args)
        a = [t.numpy() for t in args]
        ref = _exercise_reference(a[0], a[1], a[2:8:2], a[3:8:2], *a[8:])
        yield near("002", f"transformer_decoder vs float64 NumPy, T={T}", ref, got, 1e-12)


# --- seed 004: the decoder-block lesson -----------------------------------------------------
def _seed42_projections(d: int, T_q: int, T_kv: int | None):
    """The lesson's set-up: seed 42, inputs drawn, then three bias-free nn.Linear(d, d)."""
    torch.manual_seed(42)
    x = torch.randn(1, T_q, d)
    ctx = None if T_kv is None else torch.randn(1, T_kv, d)
    w_qkv = torch.cat([nn.Linear(d, d, bias=False).weight.detach() for _ in range(3)])
    mha = MultiHeadAttention(d, 1, bias=False)
    with torch.no_grad():
        mha.in_proj.weight.copy_(w_qkv)  # rows q, k, v
    return mha, x, ctx


def seed004() -> Iterator[Row]:
    """Causal mask T=5, the T=4 masked trace, the trap, cross-attention shapes."""
    m = causal_mask(5)
    yield equal("004 #47", "T=5 mask: blocked per row", [4, 3, 2, 1, 0], (~m).sum(1).tolist())
    mha, x, _ = _seed42_projections(8, 4, None)
    with torch.no_grad():
        _, w = mha(x, mask=causal_mask(4), need_weights=True)
        _, w_full = mha(x, need_weights=True)
    table = [[1, 0, 0, 0], [.4323, .5677, 0, 0], [.4099, .2935, .2966, 0],
             [.1717, .2685, .3672, .1926]]
    yield near("004 #13", "T=4 masked trace, seed 42: weights", table, w[0, 0], 5e-5)
    yield near("004 #16", "masked rows sum to 1", np.ones(4), w[0, 0].sum(-1), 1e-6)
    yield near("004 #16", "trap: zero after softmax, row sums", (0.032, 0.119, 0.707, 1.0),
               (w_full[0, 0] * causal_mask(4)).sum(-1), 5e-4, erratum=True)
    mha, dec, enc = _seed42_projections(8, 4, 6)
    with torch.no_grad():
        _, w = mha(dec, enc, need_weights=True)
    table = [[.122, .393, .134, .115, .129, .106], [.206, .165, .155, .122, .212, .140],
             [.160, .258, .167, .150, .143, .123], [.149, .141, .170, .156, .168, .216]]
    yield near("004 #22", "cross-attention T_dec=4, T_enc=6 weights", table, w[0, 0], 5e-4,
               erratum=True)
    _, w = MultiHeadAttention(8, 2)(dec, enc, need_weights=True)
    yield equal("004 #40", "weights (B, h=2, T_dec, T_enc)", [1, 2, 4, 6], list(w.shape))


def seed004_block() -> Iterator[Row]:
    """The lesson's post-norm DecoderBlock (d=16, 2 heads) run as our DecoderLayer."""
    from decoderkit.interop.torch_nn import from_torch

    torch.manual_seed(42)  # nn.TransformerDecoderLayer draws its weights as the lesson's block
    torch_block = nn.TransformerDecoderLayer(16, 2, 32, dropout=0.0, batch_first=True)
    x, z = torch.randn(1, 4, 16), torch.randn(1, 6, 16)
    ours = from_torch(torch_block)
    with torch.no_grad():
        out = ours(x, z, tgt_mask=causal_mask(4))
    yield near("004 #28", "dec_input[0,0] norm", 4.250, x[0, 0].norm(), 5e-4, erratum=True)
    yield near("004 #28", "post-norm block output[0,0] norm", 4.000, out[0, 0].norm(), 5e-4)
    yield equal("004 #50", "block output shape = input shape", [1, 4, 16], list(out.shape))
