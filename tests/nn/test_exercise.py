"""transformer_decoder (seed 002) against a float64 NumPy re-derivation and PyTorch's own layer."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch import nn

from conftest import PROPERTY, as_np, np_attention, np_layer_norm
from decoderkit import BlockSpec, DecoderLayer, causal_mask, to_torch_mask, transformer_decoder

NAMES = ("X", "enc_out", "gamma1", "beta1", "gamma2", "beta2", "gamma3", "beta3",
         "W1", "b1", "W2", "b2")
# (rtol, atol) per dtype; half-precision references are computed from the rounded inputs.
TOLERANCE = {torch.float64: (1e-12, 1e-12), torch.float32: (1e-5, 1e-5),
             torch.float16: (2e-3, 2e-3), torch.bfloat16: (1.6e-2, 1.6e-2)}


def make_inputs(T, S, D, F, dtype=torch.float64, seed=0, device="cpu") -> dict:
    g = torch.Generator().manual_seed(seed)

    def r(*shape, scale=1.0, shift=0.0):
        return (shift + scale * torch.randn(*shape, generator=g, dtype=torch.float64)).to(
            dtype=dtype, device=device)

    return dict(X=r(T, D, scale=2.0, shift=0.5), enc_out=r(S, D),
                gamma1=r(D, shift=1.0), beta1=r(D, scale=0.3), gamma2=r(D, shift=1.0),
                beta2=r(D, scale=0.3), gamma3=r(D, shift=1.0), beta3=r(D, scale=0.3),
                W1=r(D, F, scale=D ** -0.5), b1=r(F, scale=0.3),
                W2=r(F, D, scale=F ** -0.5), b2=r(D, scale=0.3))


def reference(inputs: dict) -> np.ndarray:
    """Seed 002's equations in float64 NumPy, one line each."""
    a = {k: as_np(v) for k, v in inputs.items()}
    X, E = a["X"], a["enc_out"]
    T = X.shape[0]
    H1 = np_layer_norm(X, a["gamma1"], a["beta1"])
    X1 = X + np_attention(H1, H1, H1, np.tril(np.ones((T, T), dtype=bool)))[0]
    H2 = np_layer_norm(X1, a["gamma2"], a["beta2"])
    X2 = X1 + np_attention(H2, E, E)[0]
    H3 = np_layer_norm(X2, a["gamma3"], a["beta3"])
    return X2 + np.maximum(H3 @ a["W1"] + a["b1"], 0.0) @ a["W2"] + a["b2"]


SHAPES = [(1, 1, 1, 1), (1, 3, 4, 5), (4, 2, 3, 7), (5, 6, 8, 8), (3, 3, 2, 1), (6, 1, 5, 3)]


@pytest.mark.parametrize("dtype", list(TOLERANCE))
@pytest.mark.parametrize("T,S,D,F", SHAPES)
def test_matches_numpy_reference(T, S, D, F, dtype):
    inputs = make_inputs(T, S, D, F, dtype, seed=T * 1000 + S * 100 + D * 10 + F)
    out = transformer_decoder(**inputs)
    rtol, atol = TOLERANCE[dtype]
    np.testing.assert_allclose(as_np(out), reference(inputs), rtol=rtol, atol=atol)


@PROPERTY
@given(T=st.integers(1, 6), S=st.integers(1, 6), D=st.integers(1, 9), F=st.integers(1, 9),
       seed=st.integers(0, 2**16))
def test_random_shapes_float64(T, S, D, F, seed):
    inputs = make_inputs(T, S, D, F, seed=seed)
    np.testing.assert_allclose(as_np(transformer_decoder(**inputs)), reference(inputs),
                               rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", list(TOLERANCE))
def test_keeps_dtype_device_and_inputs(dtype, device):
    inputs = make_inputs(3, 4, 5, 6, dtype, device=device)
    before = {k: v.clone() for k, v in inputs.items()}
    out = transformer_decoder(**inputs)
    assert out.dtype == dtype and out.device == inputs["X"].device
    assert out.shape == (3, 5)
    for name, value in inputs.items():
        assert torch.equal(value, before[name]), f"{name} was modified"
        assert value.data_ptr() != out.data_ptr()


def test_positional_arguments_in_exercise_order():
    inputs = make_inputs(2, 3, 4, 5)
    assert torch.equal(transformer_decoder(*inputs.values()), transformer_decoder(**inputs))


def test_single_row_self_attention_returns_h1():
    """T = 1: one key, so X1 = X + H1; with S = 1 and FF = 0 the output is X + H1 + E."""
    inputs = make_inputs(1, 1, 6, 4)
    inputs["W2"] = torch.zeros_like(inputs["W2"])
    inputs["b2"] = torch.zeros_like(inputs["b2"])
    a = {k: as_np(v) for k, v in inputs.items()}
    h1 = np_layer_norm(a["X"], a["gamma1"], a["beta1"])
    np.testing.assert_allclose(as_np(transformer_decoder(**inputs)), a["X"] + h1 + a["enc_out"],
                               rtol=1e-12, atol=1e-12)


def test_future_rows_never_change_earlier_rows():
    inputs = make_inputs(5, 3, 4, 6)
    changed = dict(inputs, X=inputs["X"].clone())
    changed["X"][3:] = 100.0 * torch.randn(2, 4, dtype=torch.float64)
    a, b = transformer_decoder(**inputs), transformer_decoder(**changed)
    assert torch.equal(a[:3], b[:3])
    assert not torch.allclose(a[3:], b[3:])


def test_stable_softmax_with_huge_scores():
    """gamma1 = 1e3 makes the scores ~1e6: exp overflows unless the row max is subtracted."""
    inputs = make_inputs(4, 3, 5, 6, torch.float32)
    inputs["gamma1"] = torch.full((5,), 1e3)
    out = transformer_decoder(**inputs)
    assert torch.isfinite(out).all()
    ref = reference(inputs)
    np.testing.assert_allclose(as_np(out), ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_inputs_computed_wider(dtype):
    """Rows of magnitude 300 overflow float16 sums of squares (> 65504); float32 inside does not."""
    inputs = make_inputs(3, 2, 8, 4, dtype)
    inputs["X"] = (300.0 + 50.0 * torch.randn(3, 8, generator=torch.Generator().manual_seed(1))
                   ).to(dtype)
    out = transformer_decoder(**inputs)
    assert torch.isfinite(out).all()
    rtol, atol = TOLERANCE[dtype]
    np.testing.assert_allclose(as_np(out), reference(inputs), rtol=rtol, atol=atol)


def test_gradients_float64():
    inputs = make_inputs(3, 2, 4, 3)
    tensors = tuple(v.requires_grad_() for v in inputs.values())
    assert torch.autograd.gradcheck(transformer_decoder, tensors)


def identity_attention(attn, D: int) -> None:
    """Identity Q/K/V and output projections with zero biases (nn.MultiheadAttention naming)."""
    eye = torch.eye(D, dtype=torch.float64)
    with torch.no_grad():
        attn.in_proj_weight.copy_(torch.cat([eye, eye, eye]))
        attn.in_proj_bias.zero_()
        attn.out_proj.weight.copy_(eye)
        attn.out_proj.bias.zero_()


def test_equals_torch_pre_norm_decoder_layer_with_identity_projections():
    """Seed 002's block is nn.TransformerDecoderLayer(norm_first=True, nhead=1) with identity
    projections, ReLU, eps 1e-5 and no dropout."""
    T, S, D, F = 4, 3, 6, 5
    inputs = make_inputs(T, S, D, F)
    peer = nn.TransformerDecoderLayer(D, 1, F, dropout=0.0, norm_first=True, batch_first=True,
                                      dtype=torch.float64).eval()
    identity_attention(peer.self_attn, D)
    identity_attention(peer.multihead_attn, D)
    with torch.no_grad():
        for i, norm in enumerate((peer.norm1, peer.norm2, peer.norm3), start=1):
            norm.weight.copy_(inputs[f"gamma{i}"])
            norm.bias.copy_(inputs[f"beta{i}"])
        peer.linear1.weight.copy_(inputs["W1"].T)
        peer.linear1.bias.copy_(inputs["b1"])
        peer.linear2.weight.copy_(inputs["W2"].T)
        peer.linear2.bias.copy_(inputs["b2"])
        theirs = peer(inputs["X"][None], inputs["enc_out"][None],
                      tgt_mask=to_torch_mask(causal_mask(T)))[0]
    torch.testing.assert_close(transformer_decoder(**inputs), theirs, rtol=1e-12, atol=1e-12)


def test_equals_library_decoder_layer_with_identity_projections():
    T, S, D, F = 3, 5, 4, 7
    inputs = make_inputs(T, S, D, F)
    layer = DecoderLayer(BlockSpec(D, 1, F, dropout=0.0, norm_first=True)).double().eval()
    eye = torch.eye(D, dtype=torch.float64)
    with torch.no_grad():
        for attn in (layer.self_attn, layer.cross_attn):
            attn.in_proj.weight.copy_(torch.cat([eye, eye, eye]))
            attn.in_proj.bias.zero_()
            attn.out_proj.weight.copy_(eye)
            attn.out_proj.bias.zero_()
        for i, res in enumerate((layer.res1, layer.res2, layer.res3), start=1):
            res.norm.weight.copy_(inputs[f"gamma{i}"])
            res.norm.bias.copy_(inputs[f"beta{i}"])
        layer.ffn.w_1.weight.copy_(inputs["W1"].T)
        layer.ffn.w_1.bias.copy_(inputs["b1"])
        layer.ffn.w_2.weight.copy_(inputs["W2"].T)
        layer.ffn.w_2.bias.copy_(inputs["b2"])
        ours = layer(inputs["X"][None], inputs["enc_out"][None], tgt_mask=causal_mask(T))[0]
    torch.testing.assert_close(transformer_decoder(**inputs), ours, rtol=1e-12, atol=1e-12)


# ---- bad inputs: the error names the argument, the expected and the actual value ----

T0, S0, D0, F0 = 2, 3, 4, 5
BAD_SHAPES = [
    ("X", (T0,), "(T, D)"), ("X", (T0, D0, 1), "(T, D)"), ("X", (0, D0), "(T, D)"),
    ("enc_out", (S0, D0 + 1), "(S, D=4)"), ("enc_out", (0, D0), "(S, D=4)"),
    ("gamma1", (D0 + 1,), "(D=4)"), ("beta2", (1, D0), "(D=4)"), ("gamma3", (), "(D=4)"),
    ("W1", (D0 + 1, F0), "(D=4, F)"), ("W1", (D0, 0), "(D=4, F)"),
    ("b1", (F0 + 1,), "(F=5)"), ("W2", (F0, D0 + 1), "(F=5, D=4)"),
    ("W2", (F0 + 1, D0), "(F=5, D=4)"), ("b2", (D0, 1), "(D=4)"),
]


@pytest.mark.parametrize("name,shape,expected", BAD_SHAPES)
def test_bad_shape(name, shape, expected):
    inputs = make_inputs(T0, S0, D0, F0)
    inputs[name] = torch.zeros(shape, dtype=torch.float64)
    pattern = re.escape(f"{name} must have shape {expected}") + ".*" + re.escape(f"got {shape}")
    with pytest.raises(ValueError, match=pattern):
        transformer_decoder(**inputs)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.bool, torch.complex128])
def test_non_float_tensor(name, dtype):
    inputs = make_inputs(T0, S0, D0, F0)
    inputs[name] = torch.zeros(inputs[name].shape, dtype=dtype)
    with pytest.raises(TypeError, match=re.escape(f"{name} must be a floating-point tensor, "
                                                  f"got dtype {dtype}")):
        transformer_decoder(**inputs)


@pytest.mark.parametrize("name", NAMES[1:])
def test_mixed_dtypes(name):
    inputs = make_inputs(T0, S0, D0, F0)
    inputs[name] = inputs[name].float()
    with pytest.raises(TypeError, match=re.escape(
            f"{name} must have X's dtype torch.float64, got torch.float32")):
        transformer_decoder(**inputs)


@pytest.mark.parametrize("name", NAMES[1:])
def test_mixed_devices(name):
    inputs = make_inputs(T0, S0, D0, F0)
    inputs[name] = inputs[name].to("meta")
    with pytest.raises(ValueError, match=re.escape(f"{name} must be on X's device cpu, got meta")):
        transformer_decoder(**inputs)


@pytest.mark.parametrize("name", NAMES)
def test_not_a_tensor(name):
    inputs = make_inputs(T0, S0, D0, F0)
    inputs[name] = as_np(inputs[name])
    with pytest.raises(TypeError, match=f"{name} must be a torch.Tensor, got ndarray"):
        transformer_decoder(**inputs)
