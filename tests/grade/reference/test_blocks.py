"""The block family at its reference settings equals the library's layers and PyTorch's own
modules on the same weights; each block mistake really changes the output."""

import pytest
import torch
from torch import nn

from decoderkit.grade.reference import blocks
from decoderkit.grade.judge.catalogue import MISTAKES
from decoderkit.nn.exercise import transformer_decoder
from decoderkit.nn.ffn import PositionwiseFeedForward
from decoderkit.nn.norms import RMSNorm
from decoderkit.nn.masks import from_torch_mask


def _weights(g, D=8, F=12, heads=None):
    def r(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.float64)

    def proj():
        return blocks.Projections(r(D, D), r(D), r(D, D), r(D), r(D, D), r(D), r(D, D), r(D),
                                  heads) if heads else None
    return blocks.BlockWeights(norms=tuple((1 + 0.3 * r(D), 0.3 * r(D)) for _ in range(3)),
                               w1=r(D, F) / 3, b1=r(F), w2=r(F, D) / 3, b2=r(D),
                               self_attn=proj(), cross_attn=proj())


def test_reference_is_seed_002_transformer_decoder():
    g = torch.Generator().manual_seed(0)
    x, enc = torch.randn(5, 8, generator=g, dtype=torch.float64), \
        torch.randn(3, 8, generator=g, dtype=torch.float64)
    w = _weights(g)
    ours = blocks.decoder_block(x, enc, w, blocks.Spec(), blocks.visibility(5, 5, "causal"))
    args = [x, enc, *[t for pair in w.norms for t in pair], w.w1, w.b1, w.w2, w.b2]
    torch.testing.assert_close(ours, transformer_decoder(*args), rtol=1e-12, atol=1e-12)


def test_post_norm_multi_head_block_is_torch_decoder_layer():
    """Against nn.TransformerDecoderLayer (post-norm) holding the same weights."""
    g = torch.Generator().manual_seed(1)
    D, F, H = 8, 12, 2
    w = _weights(g, D, F, heads=H)
    layer = nn.TransformerDecoderLayer(D, H, F, dropout=0.0, batch_first=True,
                                       dtype=torch.float64).eval()
    with torch.no_grad():
        for mha, p in ((layer.self_attn, w.self_attn), (layer.multihead_attn, w.cross_attn)):
            mha.in_proj_weight.copy_(torch.cat([p.wq, p.wk, p.wv]))
            mha.in_proj_bias.copy_(torch.cat([p.bq, p.bk, p.bv]))
            mha.out_proj.weight.copy_(p.wo)
            mha.out_proj.bias.copy_(p.bo)
        layer.linear1.weight.copy_(w.w1.T)
        layer.linear1.bias.copy_(w.b1)
        layer.linear2.weight.copy_(w.w2.T)
        layer.linear2.bias.copy_(w.b2)
        for norm, (gamma, beta) in zip((layer.norm1, layer.norm2, layer.norm3), w.norms,
                                       strict=True):
            norm.weight.copy_(gamma)
            norm.bias.copy_(beta)
    x = torch.randn(2, 4, D, generator=g, dtype=torch.float64)
    enc = torch.randn(2, 6, D, generator=g, dtype=torch.float64)
    blocked = torch.ones(4, 4, dtype=torch.bool).triu(1)
    ours = blocks.decoder_block(x, enc, w, blocks.Spec(norm="post"), from_torch_mask(blocked))
    torch.testing.assert_close(ours, layer(x, enc, tgt_mask=blocked), rtol=1e-10, atol=1e-10)


def test_layer_norm_matches_torch_and_annotated_formula():
    g = torch.Generator().manual_seed(2)
    x = torch.randn(3, 7, generator=g, dtype=torch.float64)
    gamma, beta = torch.rand(7, dtype=torch.float64), torch.rand(7, dtype=torch.float64)
    torch.testing.assert_close(blocks.layer_norm(x, gamma, beta, blocks.Spec()),
                               nn.functional.layer_norm(x, (7,), gamma, beta, eps=1e-5))
    at = blocks.Spec(ln_var="sample", ln_eps="std", ln_eps_value=1e-6)
    std = x.std(-1, keepdim=True)  # torch's unbiased std, as the notebook
    torch.testing.assert_close(blocks.layer_norm(x, gamma, beta, at),
                               gamma * (x - x.mean(-1, keepdim=True)) / (std + 1e-6) + beta)


def test_multi_head_matches_torch_multihead_attention():
    g = torch.Generator().manual_seed(3)
    D, H = 8, 2
    mha = nn.MultiheadAttention(D, H, batch_first=True, dtype=torch.float64).eval()
    (wq, wk, wv), (bq, bk, bv) = mha.in_proj_weight.detach().chunk(3), \
        mha.in_proj_bias.detach().chunk(3)
    p = blocks.Projections(wq, bq, wk, bk, wv, bv, mha.out_proj.weight.detach(),
                           mha.out_proj.bias.detach(), H)
    q = torch.randn(2, 3, D, generator=g, dtype=torch.float64)
    kv = torch.randn(2, 5, D, generator=g, dtype=torch.float64)
    pad = torch.tensor([[False] * 5, [False, False, False, True, True]])  # True = padding
    ours = blocks.multi_head(q, kv, (~pad)[:, None, :], p, blocks.Spec())
    theirs = mha(q, kv, kv, key_padding_mask=pad, need_weights=False)[0]
    torch.testing.assert_close(ours, theirs, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("mistake", [m for m in MISTAKES if m.changes], ids=lambda m: m.name)
def test_each_block_mistake_changes_the_output(mistake):
    g = torch.Generator().manual_seed(4)
    D = F = 6  # square W1, so that "W1 transposed" runs
    w = _weights(g, D, F, heads=2 if mistake.name in ("scale_d_model",
                                                      "heads_reshape_only") else None)
    x, enc = torch.randn(4, 4, D, generator=g, dtype=torch.float64), \
        torch.randn(4, 5, D, generator=g, dtype=torch.float64)
    x[0, 1] = 0.5 + 1e-3 * torch.randn(D, generator=g, dtype=torch.float64)  # eps matters
    base = blocks.Spec(norm="post") if mistake.name.startswith("pre_norm_for_post") \
        else blocks.Spec()
    if mistake.name.startswith("at_ln"):
        base = base.but(ln_var="sample", ln_eps="std", ln_eps_value=1e-6)
    spec = base.but(**mistake.changes)
    ref = blocks.decoder_block(x, enc, w, base, blocks.visibility(4, 4, base.causal))
    out = blocks.decoder_block(x, enc, w, spec, blocks.visibility(4, 4, spec.causal), base)
    assert not torch.allclose(ref, out, equal_nan=True, atol=1e-4)


def test_the_llama_family_switches_compute_nn_s_norm_and_activations():
    """ln_var="rms" (no beta) is nn.norms.RMSNorm; relu="gelu"/"swish" are nn's activations."""
    g = torch.Generator().manual_seed(5)
    x, gamma = (torch.randn(*shape, generator=g, dtype=torch.float64) for shape in ((3, 6), (6,)))
    rms = RMSNorm(6, eps=1e-5).double()
    with torch.no_grad():
        rms.weight.copy_(gamma)
    spec = blocks.Spec(ln_var="rms")
    torch.testing.assert_close(blocks.layer_norm(x, gamma, torch.zeros(6), spec), rms(x))
    for act in ("gelu", "swish"):
        ffn = PositionwiseFeedForward(6, 4, activation=act).double()
        w1, b1, w2, b2 = ffn.w_1.weight.T, ffn.w_1.bias, ffn.w_2.weight.T, ffn.w_2.bias
        torch.testing.assert_close(blocks.feed_forward(x, w1, b1, w2, b2, blocks.Spec(relu=act)),
                                   ffn(x))
