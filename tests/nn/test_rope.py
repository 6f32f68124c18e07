"""RoPE (nn.rope) against float64 NumPy: the rotate-half layout, the frequencies of each
scaling, the offset identity, and the scalings refused by name."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from decoderkit.base.errors import UsageError
from decoderkit.nn.rope import RopeSpec, Rotary, rotate


def numpy_rope(x: np.ndarray, positions: np.ndarray, w: np.ndarray) -> np.ndarray:
    """x (T, d_k) rotated pair by pair: pair i is features (i, i + d_k/2), angle p w_i."""
    half = x.shape[-1] // 2
    out = x.copy()
    for t, p in enumerate(positions):
        for i in range(half):
            c, s = math.cos(p * w[i]), math.sin(p * w[i])
            a, b = x[t, i], x[t, i + half]
            out[t, i], out[t, i + half] = a * c - b * s, a * s + b * c
    return out


def test_rotation_is_the_rotate_half_layout_of_numpy():
    spec = RopeSpec(8, theta=100.0)
    w = 100.0 ** (-np.arange(0, 8, 2) / 8)
    x = torch.randn(1, 1, 5, 8, dtype=torch.float64)
    positions = torch.tensor([[0, 3, 4, 9, 30]])
    cos, sin = Rotary(spec).double()(positions, torch.float64)
    got = rotate(x, cos, sin)[0, 0].numpy()
    np.testing.assert_allclose(got, numpy_rope(x[0, 0].numpy(), [0, 3, 4, 9, 30], w),
                               atol=1e-6)  # the angles are float32, as Hugging Face's


def test_a_query_and_a_key_score_by_their_offset_alone():
    rotary, q, k = Rotary(RopeSpec(16)), torch.randn(1, 1, 1, 16), torch.randn(1, 1, 1, 16)

    def score(p: int, p2: int) -> float:
        (cq, sq), (ck, sk) = rotary(torch.tensor([[p]]), q.dtype), rotary(torch.tensor([[p2]]),
                                                                          q.dtype)
        return float((rotate(q, cq, sq) * rotate(k, ck, sk)).sum())

    assert score(7, 3) == pytest.approx(score(104, 100), abs=1e-4)
    assert score(7, 3) == pytest.approx(score(4, 0), abs=1e-4)
    assert abs(score(7, 3) - score(7, 5)) > 1e-3  # another offset scores otherwise


def test_linear_and_llama3_frequencies_against_their_formulas():
    w = RopeSpec(64, 500000.0).frequencies().double().numpy()
    linear = RopeSpec(64, 500000.0, "linear", factor=4.0).frequencies().double().numpy()
    np.testing.assert_allclose(linear, w / 4, rtol=1e-6)
    spec = RopeSpec(64, 500000.0, "llama3", 8.0, 1.0, 4.0, 8192)
    got = spec.frequencies().double().numpy()
    want = []
    for wi in w:  # Llama 3.1's published rule, wavelength by wavelength
        wavelength = 2 * math.pi / wi
        if wavelength < 8192 / 4.0:
            want.append(wi)
        elif wavelength > 8192 / 1.0:
            want.append(wi / 8.0)
        else:
            s = (8192 / wavelength - 1.0) / (4.0 - 1.0)
            want.append((1 - s) * wi / 8.0 + s * wi)
    np.testing.assert_allclose(got, want, rtol=1e-5)
    assert (got < w).any() and (got == w).any()  # some scaled, some kept


@pytest.mark.parametrize("name, message", [
    ("yarn", "rope_scaling 'yarn' is not implemented"),
    ("dynamic", "rope_scaling 'dynamic' is not implemented"),
    ("longrope", "'longrope' is not implemented"),
    ("ntk", "rope_scaling 'ntk' is unknown"),
])
def test_scalings_we_do_not_compute_are_refused_naming_what_we_do(name, message):
    with pytest.raises(UsageError, match=message + r".*\('default', 'linear', 'llama3'\)"):
        RopeSpec(8, scaling=name).frequencies()


def test_an_odd_head_width_is_refused():
    with pytest.raises(UsageError, match="RoPE needs an even head width, got d_k=7"):
        Rotary(RopeSpec(7))
