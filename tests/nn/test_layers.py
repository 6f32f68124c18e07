"""Layer norms, residual wiring, the block spec, the layers and stacks vs NumPy and torch's
Transformer layers."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from conftest import (
    F64,
    as_np,
    copy_attention,
    copy_ffn,
    copy_norm,
    np_layer_norm,
    randn,
    randomize,
)
from decoderkit import (
    AnnotatedLayerNorm,
    BlockSpec,
    CausalStack,
    Decoder,
    DecoderLayer,
    DecoderOnlyLM,
    Encoder,
    EncoderLayer,
    LayerNorm,
    LMConfig,
    Residual,
    SelfAttentionLayer,
    causal_mask,
    make_model,
    padding_mask,
    target_mask,
    to_torch_mask,
)
from decoderkit.nn.layers import AttentionRecord
from decoderkit.nn.norms import RMSNorm, make_norm

pytestmark = pytest.mark.usefixtures("seeded")


# ---- layer norms ----

def test_layer_norm_matches_numpy():
    norm = randomize(LayerNorm(6).double())
    x = 3.0 * randn(2, 4, 6) + 1.0
    ref = np_layer_norm(as_np(x), as_np(norm.weight), as_np(norm.bias), eps=1e-5)
    np.testing.assert_allclose(as_np(norm(x)), ref, **F64)
    peer = nn.LayerNorm(6, dtype=torch.float64)
    copy_norm(norm, peer)
    torch.testing.assert_close(norm(x), peer(x), rtol=0, atol=0)


def test_layer_norm_seed_examples():
    """Seed 000: (1, 2, 3) has mean 2, variance 2/3 -> (-sqrt(3/2), 0, sqrt(3/2)) ignoring eps;
    with eps = 1e-5 the printed single-token output is (-1.2247, 0, 1.2247)."""
    x = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)
    s = math.sqrt(1.5)
    torch.testing.assert_close(LayerNorm(3, eps=0.0).double()(x),
                               torch.tensor([-s, 0.0, s], dtype=torch.float64), **F64)
    assert [round(v, 4) for v in LayerNorm(3)(x.float()).tolist()] == [-1.2247, 0.0, 1.2247]


def test_layer_norm_statistics_are_per_token():
    """Seed 000's [2, 2, 3] example: every token's normalised features have mean 0, and a
    token's output does not depend on other tokens (unlike BatchNorm)."""
    x = torch.arange(1.0, 13.0, dtype=torch.float64).view(2, 2, 3)
    y = LayerNorm(3).double()(x)
    torch.testing.assert_close(y.mean(-1), torch.zeros(2, 2, dtype=torch.float64), **F64)
    x2 = x.clone()
    x2[1] *= 100.0
    torch.testing.assert_close(LayerNorm(3).double()(x2)[0], y[0], **F64)
    torch.testing.assert_close(LayerNorm(3).double().train()(x), y, **F64)  # no running stats


def test_annotated_layer_norm_matches_numpy():
    norm = randomize(AnnotatedLayerNorm(5).double())
    x = 2.0 * randn(3, 5) - 1.0
    xn = as_np(x)
    mean = xn.mean(-1, keepdims=True)
    std = xn.std(-1, ddof=1, keepdims=True)  # unbiased, eps added to the std
    ref = as_np(norm.weight) * (xn - mean) / (std + 1e-6) + as_np(norm.bias)
    np.testing.assert_allclose(as_np(norm(x)), ref, **F64)


def test_annotated_differs_from_standard():
    """Seed 001: the Annotated variant is not nn.LayerNorm. On (1, 2, 3) the unbiased std is 1,
    so it gives (-1, 0, 1) / (1 + 1e-6) where the standard one gives about +-1.2247."""
    x = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)
    expected = torch.tensor([-1.0, 0.0, 1.0], dtype=torch.float64) / (1 + 1e-6)
    torch.testing.assert_close(AnnotatedLayerNorm(3).double()(x), expected, **F64)
    assert not torch.allclose(AnnotatedLayerNorm(3).double()(x), LayerNorm(3).double()(x))


def test_make_norm():
    assert isinstance(make_norm("standard", 4), LayerNorm)
    assert isinstance(make_norm("annotated", 4), AnnotatedLayerNorm)
    rms = make_norm("rms", 4, eps=1e-3)
    assert isinstance(rms, RMSNorm) and rms.eps == 1e-3
    assert make_norm("standard", 4, eps=1e-3).eps == 1e-3
    with pytest.raises(ValueError, match=r"layer_norm must be one of .* got 'batch'"):
        make_norm("batch", 4)


# ---- residual ----

@pytest.mark.parametrize("layer_norm", ["standard", "annotated"])
def test_residual_wiring(layer_norm):
    """post-norm LN(x + F(x)); pre-norm x + F(LN(x)) -- different functions."""
    x = randn(2, 3, 4)
    sub = randomize(nn.Linear(4, 4).double(), seed=1)
    post = randomize(Residual(4, 0.0, norm_first=False, layer_norm=layer_norm).double(), 2)
    pre = randomize(Residual(4, 0.0, norm_first=True, layer_norm=layer_norm).double(), 2)
    torch.testing.assert_close(post(x, sub), post.norm(x + sub(x)), **F64)
    torch.testing.assert_close(pre(x, sub), x + sub(pre.norm(x)), **F64)
    assert not torch.allclose(post(x, sub), pre(x, sub))


def test_residual_dropout_only_in_training():
    res = Residual(4, 0.5, norm_first=True, layer_norm="standard").double()
    x = randn(3, 4)
    sub = torch.ones_like
    res.eval()
    torch.testing.assert_close(res(x, sub), x + 1.0, **F64)
    res.train()
    torch.manual_seed(0)
    delta = res(x, sub) - x  # dropped (0), or kept and scaled by 1 / (1 - p) (2)
    dropped = delta.abs() < 1e-12
    assert dropped.any() and (~dropped).any()
    torch.testing.assert_close(delta[~dropped], torch.full_like(delta[~dropped], 2.0), **F64)


# ---- layers and stacks against torch's own ----

def copy_encoder_layer(ours: EncoderLayer, peer: nn.TransformerEncoderLayer) -> None:
    copy_attention(ours.self_attn, peer.self_attn)
    copy_ffn(ours.ffn, peer)
    copy_norm(ours.res1.norm, peer.norm1)
    copy_norm(ours.res2.norm, peer.norm2)


def copy_decoder_layer(ours: DecoderLayer, peer: nn.TransformerDecoderLayer) -> None:
    copy_attention(ours.self_attn, peer.self_attn)
    copy_attention(ours.cross_attn, peer.multihead_attn)
    copy_ffn(ours.ffn, peer)
    for i, res in enumerate((ours.res1, ours.res2, ours.res3), start=1):
        copy_norm(res.norm, getattr(peer, f"norm{i}"))


SRC_IDS = torch.tensor([[3, 4, 5, 6, 7], [3, 4, 5, 0, 0]])
TGT_IDS = torch.tensor([[3, 4, 5, 6], [3, 4, 0, 0]])
D, H, FF = 8, 2, 12


def torch_kwargs(norm_first, activation):
    return dict(d_model=D, nhead=H, dim_feedforward=FF, dropout=0.0, activation=activation,
                batch_first=True, norm_first=norm_first, dtype=torch.float64)


@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_layer_matches_torch(norm_first, activation):
    ours = randomize(EncoderLayer(BlockSpec(D, H, FF, 0.0, norm_first, activation=activation))
                     .double())
    peer = nn.TransformerEncoderLayer(**torch_kwargs(norm_first, activation)).eval()
    copy_encoder_layer(ours, peer)
    x = randn(2, 5, D, seed=3)
    mask = padding_mask(SRC_IDS, 0)
    # grad enabled: torch takes its reference path, not the fused inference kernel
    ref = peer(x, src_key_padding_mask=to_torch_mask(mask[:, 0]))
    torch.testing.assert_close(ours.eval()(x, mask), ref, **F64)


@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_layer_matches_torch(norm_first, activation):
    ours = randomize(DecoderLayer(BlockSpec(D, H, FF, 0.0, norm_first, activation=activation))
                     .double())
    peer = nn.TransformerDecoderLayer(**torch_kwargs(norm_first, activation)).eval()
    copy_decoder_layer(ours, peer)
    x, memory = randn(2, 4, D, seed=4), randn(2, 5, D, seed=5)
    src_mask, tgt_mask = padding_mask(SRC_IDS, 0), target_mask(TGT_IDS, 0)
    ref = peer(x, memory, tgt_mask=to_torch_mask(causal_mask(4)),
               tgt_key_padding_mask=to_torch_mask(padding_mask(TGT_IDS, 0)[:, 0]),
               memory_key_padding_mask=to_torch_mask(src_mask[:, 0]))
    torch.testing.assert_close(ours.eval()(x, memory, src_mask, tgt_mask), ref, **F64)


@pytest.mark.parametrize("norm_first", [False, True])
def test_stacks_match_torch(norm_first):
    """N independent layers; a pre-norm stack ends with a final norm, a post-norm one does not."""
    N = 3
    spec = BlockSpec(D, H, FF, 0.0, norm_first)
    encoder = randomize(Encoder(spec, N).double()).eval()
    decoder = randomize(Decoder(spec, N).double(), seed=1).eval()
    kw = torch_kwargs(norm_first, "relu")
    final = (lambda: nn.LayerNorm(D, dtype=torch.float64)) if norm_first else (lambda: None)
    peer_enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(**kw), N, norm=final(),
                                     enable_nested_tensor=False)
    peer_dec = nn.TransformerDecoder(nn.TransformerDecoderLayer(**kw), N, norm=final())
    for ours, theirs in zip(encoder.layers, peer_enc.layers, strict=True):
        copy_encoder_layer(ours, theirs)
    for ours, theirs in zip(decoder.layers, peer_dec.layers, strict=True):
        copy_decoder_layer(ours, theirs)
    assert isinstance(encoder.norm, LayerNorm if norm_first else nn.Identity)
    assert isinstance(decoder.norm, LayerNorm if norm_first else nn.Identity)
    if norm_first:
        copy_norm(encoder.norm, peer_enc.norm)
        copy_norm(decoder.norm, peer_dec.norm)
    src, tgt = randn(2, 5, D, seed=6), randn(2, 4, D, seed=7)
    src_mask = padding_mask(SRC_IDS, 0)
    memory = encoder(src, src_mask)
    ref_memory = peer_enc.eval()(src, src_key_padding_mask=to_torch_mask(src_mask[:, 0]))
    torch.testing.assert_close(memory, ref_memory, **F64)
    out = decoder(tgt, memory, src_mask, causal_mask(4))
    ref = peer_dec.eval()(tgt, memory, tgt_mask=to_torch_mask(causal_mask(4)),
                          memory_key_padding_mask=to_torch_mask(src_mask[:, 0]))
    torch.testing.assert_close(out, ref, **F64)


@pytest.mark.parametrize("seed", range(4))
def test_encoder_without_positions_is_permutation_equivariant(seed):
    """Seed 000: with no mask and no positional signal, permuting tokens permutes outputs."""
    encoder = randomize(Encoder(BlockSpec(D, H, FF, 0.0), 2), seed).double().eval()
    x = randn(2, 6, D, seed=seed)
    perm = torch.randperm(6, generator=torch.Generator().manual_seed(seed))
    torch.testing.assert_close(encoder(x[:, perm]), encoder(x)[:, perm], **F64)


def test_post_norm_output_rows_have_norm_sqrt_d():
    """Seed 004: a post-norm block ends in LayerNorm, so at (1, 0) affine init every output row
    has norm sqrt(d * var / (var + eps)) -- 4.000 at d = 16, whatever the input's norm."""
    layer = DecoderLayer(BlockSpec(16, 4, 32, 0.0)).eval()
    x = 3.0 * torch.randn(1, 4, 16)
    out = layer(x, torch.randn(1, 6, 16), tgt_mask=causal_mask(4))
    assert out.shape == x.shape
    assert [round(v, 3) for v in out.norm(dim=-1)[0].tolist()] == [4.0] * 4


def test_final_norm_override():
    assert isinstance(Encoder(BlockSpec(D, H, FF), 1, final_norm=True).norm, LayerNorm)
    assert isinstance(Decoder(BlockSpec(D, H, FF, norm_first=True), 1, final_norm=False).norm,
                      nn.Identity)
    assert isinstance(Decoder(BlockSpec(D, H, FF, norm_first=True, layer_norm="annotated"),
                              1).norm,
                      AnnotatedLayerNorm)


def rates(layer: nn.Module) -> dict[str, float]:
    """Each dropout's rate by where it sits: residual (and embedding), attention, FFN."""
    found = {"residual": set(), "attention": set(), "ffn": set()}
    for name, m in layer.named_modules():
        if isinstance(m, nn.Dropout):
            found["ffn" if name.endswith("ffn.dropout") else "residual"].add(m.p)
        elif hasattr(m, "dropout") and isinstance(m.dropout, float):
            found["attention"].add(m.dropout)
    return {k: v.pop() if len(v) == 1 else v for k, v in found.items()}


@pytest.mark.parametrize("stack", [Encoder, Decoder])
def test_attention_and_ffn_dropout_apart_from_the_sublayer_rate(stack):
    assert rates(stack(BlockSpec(D, H, FF, dropout=0.3), 2)) == \
        {"residual": 0.3, "attention": 0.3, "ffn": 0.3}  # the paper's: one rate (None)
    spec = BlockSpec(D, H, FF, dropout=0.3, attention_dropout=0.0, ffn_dropout=0.2)
    assert rates(stack(spec, 2)) == \
        {"residual": 0.3, "attention": 0.0, "ffn": 0.2}
    x = randn(2, 5, D)
    for only in ({"attention_dropout": 0.5}, {"ffn_dropout": 0.5}):  # each one is applied
        kwargs = {"attention_dropout": 0.0, "ffn_dropout": 0.0} | only
        layer = EncoderLayer(BlockSpec(D, H, FF, 0.0, **kwargs)).double()
        assert not torch.allclose(layer.train()(x), layer.eval()(x))
    quiet = EncoderLayer(BlockSpec(D, H, FF, 0.0, attention_dropout=0.0, ffn_dropout=0.0))
    quiet = quiet.double()
    torch.testing.assert_close(quiet.train()(x), quiet.eval()(x), **F64)


def test_layers_are_independent_copies():
    """Seed 001: clones are separate modules with separate storage, not one shared layer."""
    decoder = Decoder(BlockSpec(D, H, FF), 4)
    ptrs = [{p.data_ptr() for p in layer.parameters()} for layer in decoder.layers]
    for i in range(4):
        for j in range(i + 1, 4):
            assert not ptrs[i] & ptrs[j]
    w0 = decoder.layers[0].ffn.w_1.weight
    assert not torch.equal(w0, decoder.layers[1].ffn.w_1.weight)
    with torch.no_grad():
        w0.add_(1.0)
    assert not torch.equal(w0, decoder.layers[2].ffn.w_1.weight)


def test_attention_weights_are_returned_in_a_record_and_not_kept():
    """A record passed in gets the layer's weights (the same output either way); the layer
    keeps no weights of its own. The self-attention weights equal its sublayer's own."""
    layer = randomize(DecoderLayer(BlockSpec(D, H, FF, 0.0)).double()).eval()
    x, memory = randn(2, 4, D), randn(2, 6, D, seed=1)
    record = AttentionRecord()
    out = layer(x, memory, tgt_mask=causal_mask(4), record=record)
    torch.testing.assert_close(out, layer(x, memory, tgt_mask=causal_mask(4)), **F64)
    (self_w,), (cross_w,) = record.self_attn, record.cross_attn
    assert self_w.shape == (2, H, 4, 4) and cross_w.shape == (2, H, 4, 6)
    _, expect = layer.self_attn(x, mask=causal_mask(4), need_weights=True)  # post-norm: x
    torch.testing.assert_close(self_w, expect, **F64)
    assert self_w.triu(1).eq(0).all()
    torch.testing.assert_close(cross_w.sum(-1), torch.ones(2, H, 4, dtype=torch.float64), **F64)
    assert not any(isinstance(v, torch.Tensor) for v in vars(layer).values())


def test_decoder_layer_gradients_finite_with_padded_rows():
    layer = randomize(DecoderLayer(BlockSpec(D, H, FF, 0.0)).double())
    x, memory = randn(2, 4, D).requires_grad_(), randn(2, 5, D, seed=1)
    empty_tgt = target_mask(torch.tensor([[3, 4, 5, 6], [0, 0, 0, 0]]), 0)  # rows with no key
    out = layer(x, memory, padding_mask(SRC_IDS, 0), empty_tgt)
    out.sum().backward()
    assert torch.isfinite(out).all() and torch.isfinite(x.grad).all()


# ---- the block spec, and the decoder-only LM's blocks ----

def test_a_block_spec_refuses_an_unknown_choice_naming_the_field():
    for name, value in (("layer_norm", "batch"), ("activation", "swiglu"), ("ffn", "moe")):
        with pytest.raises(ValueError, match=rf"{name} must be one of .* got '{value}'"):
            BlockSpec(D, H, FF, **{name: value})
    with pytest.raises(TypeError, match=r"DecoderLayer takes a BlockSpec .* got str '8'"):
        DecoderLayer(str(D))
    with pytest.raises(TypeError, match=r"CausalStack takes a BlockSpec .* got dict"):
        CausalStack({"d_model": D}, 2)


def shapes(module: nn.Module) -> dict[str, tuple[int, ...]]:
    return {k: tuple(v.shape) for k, v in module.state_dict().items()}


def test_each_familys_model_is_the_stacks_of_its_configs_block_spec():
    """The LM's blocks are a CausalStack of SelfAttentionLayers, the translation model's an
    Encoder of EncoderLayers and a Decoder; each holds what its config's spec builds."""
    lm = DecoderOnlyLM(LMConfig(vocab_size=11, n_layers=2, d_model=D, n_heads=H, d_ff=FF,
                                max_len=16, norm="rms", ffn="gated", n_kv_heads=1,
                                bias=False, positions="rope"))
    assert type(lm.blocks) is CausalStack
    assert {type(layer) for layer in lm.blocks.layers} == {SelfAttentionLayer}
    assert shapes(lm.blocks) == shapes(CausalStack(lm.config.block_spec(), 2))
    assert isinstance(lm.blocks.layers[0].res1.norm, RMSNorm)
    model = make_model(11, 13, N=2, d_model=D, d_ff=FF, h=H, norm_first=True)
    assert {type(layer) for layer in model.encoder.layers} == {EncoderLayer}
    assert shapes(model.encoder) == shapes(Encoder(model.config.block_spec(), 2))
    assert shapes(model.decoder) == shapes(Decoder(model.config.block_spec(), 2))


def test_a_causal_stack_is_its_layers_under_a_causal_mask():
    """No position sees a later one: changing positions 3.. leaves 0..2 as they were."""
    stack = randomize(CausalStack(BlockSpec(D, H, FF, 0.0, norm_first=True), 2).double()).eval()
    x = randn(2, 5, D)
    out = stack(x)
    ref = x
    for layer in stack.layers:
        ref = layer(ref, causal_mask(5))
    torch.testing.assert_close(out, stack.norm(ref), **F64)
    later = x.clone()
    later[:, 3:] = randn(2, 2, D, seed=1)
    moved = stack(later)
    torch.testing.assert_close(moved[:, :3], out[:, :3], **F64)
    assert not torch.allclose(moved[:, 3:], out[:, 3:])


@pytest.mark.parametrize("old,new", [
    (lambda: EncoderLayer(D, H, FF, 0.0, True, activation="gelu"),
     lambda: EncoderLayer(BlockSpec(D, H, FF, 0.0, True, activation="gelu"))),
    (lambda: DecoderLayer(D, H, FF, 0.1, False, "annotated", ffn_dropout=0.0),
     lambda: DecoderLayer(BlockSpec(D, H, FF, 0.1, False, "annotated", ffn_dropout=0.0))),
    (lambda: Encoder(D, H, FF, 2, 0.0, True, "standard", "relu", True, False),
     lambda: Encoder(BlockSpec(D, H, FF, 0.0, True), 2, final_norm=False)),
    (lambda: Decoder(D, H, FF, 3, norm_first=True, final_norm=True),
     lambda: Decoder(BlockSpec(D, H, FF, norm_first=True), 3, final_norm=True)),
])
def test_the_form_before_the_spec_still_builds_the_same_layer_with_a_warning(old, new):
    """Yesterday's EncoderLayer(d_model, n_heads, d_ff, ...) and Encoder(d_model, n_heads,
    d_ff, n_layers, ...): the same modules and state-dict keys as the spec's, warned."""
    with pytest.warns(DeprecationWarning, match=r"is deprecated: pass nn\.layers\.BlockSpec"):
        torch.manual_seed(0)
        got = old()
    torch.manual_seed(0)
    want = new()
    assert repr(got) == repr(want)
    assert all(torch.equal(a, b) for a, b in zip(got.state_dict().values(),
                                                 want.state_dict().values(), strict=True))
    assert list(got.state_dict()) == list(want.state_dict())


def test_the_form_before_the_spec_refuses_what_it_never_took_naming_the_class():
    with pytest.warns(DeprecationWarning), pytest.raises(TypeError, match="DecoderLayer: .*colour"):
        DecoderLayer(D, H, FF, colour=1)
    with pytest.warns(DeprecationWarning), pytest.raises(TypeError, match="EncoderLayer: .*n_he"):
        EncoderLayer(D)  # n_heads and d_ff missing
    with pytest.raises(TypeError, match="Encoder takes a BlockSpec"):
        Encoder(D, H, FF, 2, *[0.0] * 8)  # more than the old form's arguments


def test_a_spec_beside_the_old_forms_arguments_is_refused_not_ignored():
    spec = BlockSpec(D, H, FF)
    with pytest.raises(TypeError, match=r"SelfAttentionLayer takes a BlockSpec alone, got it "
                                        r"with \(0\.3,\)"):
        SelfAttentionLayer(spec, 0.3)
    with pytest.raises(TypeError, match=r"CausalStack takes a BlockSpec alone.*'bias'"):
        CausalStack(spec, 2, bias=False)
    assert len(CausalStack(spec, 2, final_norm=True).layers) == 2  # its own arguments
