"""Self-consistency checks for ``conformance``: independent paths must agree.

The SDPA fast path vs the reference formula, the KV cache vs recomputation, padding vs no
padding, and our modules vs PyTorch's with the same weights, all in float64.

Legend: B batch, T target length, S source length, d model width, h heads.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from decoderkit.nn.attend import FUSED_MIN_QUERIES, attention
from decoderkit.nn.attention import MultiHeadAttention
from decoderkit.nn.norms import LayerNorm
from decoderkit.nn.masks import causal_mask, padding_mask, target_mask
from decoderkit.nn.seq2seq.model import make_model
from decoderkit.report.rows import Row, equal, near


def consistency_attention() -> Iterator[Row]:
    """SDPA fast path vs the reference path vs PyTorch's SDPA, float64, masks of every kind."""
    gen = torch.Generator().manual_seed(0)
    T = FUSED_MIN_QUERIES  # fewer queries take the reference path on a CPU (fused_pays)
    ids = torch.tensor([[3] * (T - 1) + [0], [3] * (T // 2) + [0] * (T - T // 2)])  # pad_id 0
    queries = torch.randn(2, T, 16, generator=gen, dtype=torch.float64)
    mem = torch.randn(2, T, 16, generator=gen, dtype=torch.float64)
    mha = MultiHeadAttention(16, 4).double()
    for name, ctx, mask in (("causal+padding", None, target_mask(ids, 0)),
                            ("source padding", mem, padding_mask(ids, 0)),
                            ("none", mem, None)):
        with torch.no_grad():
            fast, _ = mha(queries, ctx, mask=mask)
            ref, _ = mha(queries, ctx, mask=mask, need_weights=True)
        yield near("self", f"MHA fast (SDPA) = reference, {name}", 0.0, (fast - ref).abs().max(),
                   1e-12)
    q, k, v = (torch.randn(2, 3, 5, 8, generator=gen, dtype=torch.float64) for _ in range(3))
    m = causal_mask(5)
    yield near("self", "attention() = F.scaled_dot_product_attention", 0.0,
               (attention(q, k, v, m)[0] - F.scaled_dot_product_attention(q, k, v, m)).abs().max(),
               1e-12)
    x = torch.randn(2, 4, 16, generator=gen, dtype=torch.float64)
    perm = torch.tensor([2, 0, 3, 1])
    with torch.no_grad():
        out, _ = mha(x)  # no mask, no positions
        out_perm, _ = mha(x[:, perm])
        causal, _ = mha(x, mask=causal_mask(4))
        changed = x.clone()
        changed[:, 3] += 1.0  # change the last position only
        causal_changed, _ = mha(changed, mask=causal_mask(4))
    yield near("self", "no mask: self-attention permutation-equivariant", out[:, perm],
               out_perm, 1e-12)
    yield near("self", "causal: later tokens never change earlier outputs",
               causal[:, :3], causal_changed[:, :3], 0.0)
    blocked = torch.zeros(5, 5, dtype=torch.bool)
    out, w = attention(q, k, v, blocked)
    yield equal("self", "fully masked rows: zero output, no NaN", True,
                bool(out.eq(0).all() and w.eq(0).all()))


def consistency_layer_norms() -> Iterator[Row]:
    """LayerNorm = float64 NumPy (population variance, eps inside the root) and nn.LayerNorm."""
    x = torch.randn(3, 5, 8, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    a = x.numpy()
    ref = (a - a.mean(-1, keepdims=True)) / np.sqrt(a.var(-1, keepdims=True) + 1e-5)
    with torch.no_grad():
        yield near("self", "LayerNorm = NumPy formula", ref, LayerNorm(8).double()(x), 1e-12)
        torch_ln = nn.LayerNorm(8).double()
        yield near("self", "LayerNorm = nn.LayerNorm", torch_ln(x), LayerNorm(8).double()(x), 1e-12)


def _tiny_model():
    torch.manual_seed(0)
    model = make_model(11, 13, N=2, d_model=16, d_ff=32, h=4, dropout=0.0).double().eval()
    src = torch.tensor([[3, 4, 5, 6, 7], [8, 9, 10, 0, 0]])
    return model, src, padding_mask(src, model.config.pad_id)


def consistency_cache() -> Iterator[Row]:
    """Incremental decoding with the KV cache = full recomputation, at every position."""
    model, src, src_mask = _tiny_model()
    tgt = torch.tensor([[1, 5, 6, 7, 8, 9], [1, 9, 8, 7, 6, 5]])
    with torch.no_grad():
        memory = model.encode(src, src_mask)
        full = model.decode(memory, src_mask, tgt, target_mask(tgt, 0))
        cache = model.new_cache(memory, tgt.size(1))
        steps = [model.decode(memory, src_mask, tgt[:, t:t + 1], None, cache,
                              at=cache.self_kv.at(t)) for t in range(tgt.size(1))]
    yield near("self", "cached decode = recompute (features, float64)", 0.0,
               (torch.cat(steps, 1) - full).abs().max(), 1e-12)
    from decoderkit.generation.seq2seq.decoding import greedy_decode

    with torch.no_grad():
        a = greedy_decode(model, src, src_mask, max_len=8, use_cache=True)
        b = greedy_decode(model, src, src_mask, max_len=8, use_cache=False)
    yield equal("self", "greedy_decode: cache = no cache (tokens)", b.tokens.tolist(),
                a.tokens.tolist())
    yield near("self", "greedy_decode: cache = no cache (scores)", b.scores, a.scores, 1e-10)
    from decoderkit.generation.seq2seq.search import beam_search

    with torch.no_grad():
        one = beam_search(model, src, src_mask, beam_size=1, max_len=8)
        cached = beam_search(model, src, src_mask, beam_size=3, max_len=8)
        full = beam_search(model, src, src_mask, beam_size=3, max_len=8, use_cache=False)
    yield equal("self", "beam size 1 = greedy (tokens)", a.tokens.tolist(), one.tokens.tolist())
    yield equal("self", "beam 3: cache = no cache (tokens)", full.tokens.tolist(),
                cached.tokens.tolist())


def consistency_attention_maps() -> Iterator[Row]:
    """The figures' teacher-forced attention maps = the weights seen while decoding (cached)."""
    from decoderkit.generation.seq2seq.decoding import greedy_decode
    from decoderkit.report.seq2seq.attention_maps import attention_weights

    model, src, _ = _tiny_model()
    src = src[:1]  # (1, S)
    with torch.no_grad():
        out = greedy_decode(model, src, None, max_len=6, explain=1)
    tgt = torch.cat([torch.tensor([[model.config.bos_id]]), out.tokens[:, :-1]], 1)  # (1, T)
    self_w, cross_w = attention_weights(model, src, tgt)  # per layer (h, T, T), (h, T, S)
    err_self = max((step.self_weights[i][0] - self_w[i][:, t, :t + 1]).abs().max()
                   for t, step in enumerate(out.steps) for i in range(len(self_w)))
    err_cross = max((step.cross_weights[i][0] - cross_w[i][:, t]).abs().max()
                    for t, step in enumerate(out.steps) for i in range(len(cross_w)))
    yield near("self", "attention maps = cached decoding's self weights", 0.0, err_self, 1e-12)
    yield near("self", "attention maps = cached decoding's cross weights", 0.0, err_cross, 1e-12)


def consistency_interop() -> Iterator[Row]:
    """Ours vs PyTorch's modules with the same weights (``interop.torch_nn``), float64."""
    from decoderkit.interop.torch_nn import from_torch, to_torch

    torch.manual_seed(0)
    ids = torch.tensor([[3, 4, 5, 0], [3, 4, 0, 0]])
    x = torch.randn(2, 4, 16, dtype=torch.float64)
    mem = torch.randn(2, 4, 16, dtype=torch.float64)
    blocked_tgt, blocked_src = ~causal_mask(4), ids == 0  # torch's True = blocked
    for norm_first in (False, True):
        peer = nn.TransformerDecoderLayer(16, 4, 32, dropout=0.0, batch_first=True,
                                          norm_first=norm_first).double().eval()
        ours = from_torch(peer).eval()
        back = to_torch(ours).eval()
        with torch.no_grad():
            want = peer(x, mem, tgt_mask=blocked_tgt, memory_key_padding_mask=blocked_src)
            got = ours(x, mem, padding_mask(ids, 0), causal_mask(4))
            again = back(x, mem, tgt_mask=blocked_tgt, memory_key_padding_mask=blocked_src)
        kind = "pre-norm" if norm_first else "post-norm"
        yield near("self", f"from_torch(TransformerDecoderLayer), {kind}", want, got, 1e-10)
        yield near("self", f"to_torch round trip, {kind}", want, again, 1e-10)
    peer = nn.Transformer(16, 4, 2, 2, 32, dropout=0.0, batch_first=True).double().eval()
    peer.encoder.use_nested_tensor = False  # its prototype fast path would only warn
    with torch.no_grad():
        want = peer(mem, x, tgt_mask=blocked_tgt, src_key_padding_mask=blocked_src,
                    memory_key_padding_mask=blocked_src)
        got = from_torch(peer).eval()(mem, x, padding_mask(ids, 0), causal_mask(4))
    yield near("self", "from_torch(nn.Transformer), 2+2 layers", want, got, 1e-10)


def consistency_padding() -> Iterator[Row]:
    """Padding never leaks: a sentence decodes the same alone and padded in a batch."""
    model, src, src_mask = _tiny_model()
    tgt = torch.tensor([[1, 5, 6]])
    with torch.no_grad():
        alone = model(src[1:, :3], tgt, padding_mask(src[1:, :3], 0), target_mask(tgt, 0))
        batched = model(src, tgt.expand(2, -1), src_mask, target_mask(tgt.expand(2, -1), 0))
        empty = model(torch.zeros_like(src), tgt.expand(2, -1),
                      padding_mask(torch.zeros_like(src), 0), target_mask(tgt.expand(2, -1), 0))
    yield near("self", "sentence alone = padded in a batch", alone[0], batched[1], 1e-12)
    yield equal("self", "all-padding source: finite outputs", True, bool(empty.isfinite().all()))


def consistency_marian() -> Iterator[Row]:
    """Hugging Face Marian (opus-mt) through interop.marian: log-probabilities, greedy, beam."""
    import tempfile
    from pathlib import Path

    import transformers  # missing: a skip row (conformance.run_checks)

    from decoderkit.generation.seq2seq.decoding import greedy_decode
    from decoderkit.generation.seq2seq.search import beam_search
    from decoderkit.interop.marian.hf import build_model, read_config

    pad = 39
    hf_config = transformers.MarianConfig(
        vocab_size=40, d_model=16, encoder_layers=2, decoder_layers=2, encoder_ffn_dim=32,
        decoder_ffn_dim=32, encoder_attention_heads=2, decoder_attention_heads=2,
        max_position_embeddings=32, activation_function="swish", pad_token_id=pad,
        decoder_start_token_id=pad, eos_token_id=0, scale_embedding=True)
    gen = torch.Generator().manual_seed(0)
    hf = transformers.MarianMTModel(hf_config).eval().double()
    with torch.no_grad():
        for p in hf.parameters():  # away from the init: outputs vary by source
            p.copy_(0.5 * torch.randn(p.shape, generator=gen, dtype=p.dtype) + (p.dim() == 1))
        hf.model.shared.weight[pad] = 0.0  # a Marian model's pad row
        hf.final_logits_bias.copy_(torch.randn(1, 40, generator=gen, dtype=torch.float64))
        for side in (hf.model.encoder, hf.model.decoder):  # the exact float64 sinusoids
            n, d = side.embed_positions.weight.shape
            angle = np.arange(n)[:, None] / 10000 ** (np.arange(0, d, 2) / d)
            side.embed_positions.weight.copy_(torch.from_numpy(
                np.concatenate([np.sin(angle), np.cos(angle)], axis=1)))
    with tempfile.TemporaryDirectory() as tmp:
        hf_config.to_json_file(Path(tmp) / "config.json")
        config, _ = read_config(tmp)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        ours = build_model(config, Path("MarianMTModel.state_dict()"), hf.state_dict()).eval()
    finally:
        torch.set_default_dtype(previous)
    src = torch.randint(1, pad, (6, 7), generator=gen)
    src[:, -1] = 0  # sources end with EOS
    src[3:, 4:] = pad  # padded rows
    src[3:, 3] = 0
    tgt = torch.randint(1, pad, (6, 5), generator=gen)
    tgt[:, 0] = pad  # the decoder start
    with torch.no_grad():
        want = torch.log_softmax(hf(input_ids=src, attention_mask=(src != pad).long(),
                                    decoder_input_ids=tgt).logits, dim=-1)
        got = ours.generator(ours(src, tgt, padding_mask(src, pad), causal_mask(5)))
    yield near("self", "HF Marian log-probs = ours, float64, padded", want, got, 1e-12)
    common = dict(input_ids=src, attention_mask=(src != pad).long(), max_length=13,
                  bad_words_ids=[[pad]], forced_eos_token_id=None)
    for beam in (1, 4):
        ref = hf.generate(num_beams=beam, early_stopping=False, **common)[:, 1:]
        out = (greedy_decode(ours, src, None, max_len=12) if beam == 1 else
               beam_search(ours, src, None, beam_size=4, max_len=12, retire=True)).tokens
        ref, out = (F.pad(t, (0, 12 - t.size(1)), value=pad) for t in (ref, out))
        yield equal("self", f"HF Marian generate(num_beams={beam}) tokens = ours",
                    ref.tolist(), out.tolist())
