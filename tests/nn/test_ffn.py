"""The feed-forward networks and their activations vs float64 NumPy."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from conftest import F64, as_np, randn, randomize
from decoderkit import PositionwiseFeedForward
from decoderkit.nn.ffn import ACTIVATIONS

pytestmark = pytest.mark.usefixtures("seeded")


def numpy_activation(name: str, h: np.ndarray) -> np.ndarray:
    """Each activation's formula, re-derived in float64 NumPy."""
    if name == "relu":
        return np.maximum(h, 0.0)
    if name == "gelu":  # exact GELU: x Phi(x)
        return h * 0.5 * (1.0 + np.vectorize(math.erf)(h / math.sqrt(2.0)))
    if name == "gelu_tanh":  # GPT-2's tanh form
        return 0.5 * h * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (h + 0.044715 * h**3)))
    assert name == "swish"  # x sigmoid(x)
    return h / (1.0 + np.exp(-h))


@pytest.mark.parametrize("activation", ["relu", "gelu", "gelu_tanh", "swish"])
def test_ffn_matches_numpy(activation):
    ffn = randomize(PositionwiseFeedForward(4, 7, dropout=0.0, activation=activation).double())
    x = randn(2, 3, 4)
    h = as_np(x) @ as_np(ffn.w_1.weight).T + as_np(ffn.w_1.bias)
    h = numpy_activation(activation, h)
    ref = h @ as_np(ffn.w_2.weight).T + as_np(ffn.w_2.bias)
    np.testing.assert_allclose(as_np(ffn(x)), ref, **F64)


def test_activations_are_named_and_distinct():
    """Every name is tested above; the two GELU forms differ (about 4e-4 at most), so confusing
    GPT-2's tanh form with nanoGPT's exact one is visible."""
    assert set(ACTIVATIONS) == {"relu", "gelu", "gelu_tanh", "swish"}
    x = torch.linspace(-6, 6, 2001, dtype=torch.float64)
    gap = (ACTIVATIONS["gelu"](x) - ACTIVATIONS["gelu_tanh"](x)).abs().max().item()
    assert 1e-4 < gap < 1e-3


def test_ffn_is_position_wise():
    """Seed 000: the same FFN acts independently on every position."""
    ffn = randomize(PositionwiseFeedForward(4, 6).double())
    x = randn(2, 5, 4)
    per_position = torch.stack([ffn(x[:, t]) for t in range(5)], dim=1)
    torch.testing.assert_close(ffn(x), per_position, **F64)


def test_ffn_shapes_and_errors():
    """Seed 001: 512 -> 2048 -> 512, 2 d f + f + d parameters."""
    ffn = PositionwiseFeedForward(512, 2048)
    assert ffn.w_1.weight.shape == (2048, 512) and ffn.w_2.weight.shape == (512, 2048)
    assert sum(p.numel() for p in ffn.parameters()) == 2_099_712
    with pytest.raises(ValueError, match=r"activation must be one of .* got 'swiglu'"):
        PositionwiseFeedForward(4, 8, activation="swiglu")
