"""Rotary position embeddings (RoPE, Su et al. 2021) in Hugging Face's rotate-half layout.

Each head's d_k features are d_k/2 pairs (i, i + d_k/2) (the two halves, not adjacent
features), pair i rotated by the angle p w_i at position p, w_i = theta^(-2i/d_k): a query
at p and a key at p' then score a function of p - p' alone. Scalings of the frequencies
w_i, as real configs carry them: ``default`` (none), ``linear`` (w_i / factor: positions
stretched), ``llama3`` (Llama 3.1's: long wavelengths divided by the factor, short ones
kept, those between interpolated smoothly).

Legend: B batch (or 1), T positions, h heads, d_k head width.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from decoderkit.base.errors import UsageError

ROPE_SCALINGS = ("default", "linear", "llama3")  # what decoderkit computes
OTHER_SCALINGS = ("dynamic", "yarn", "longrope")  # real configs' others: refused by name


def check_scaling(name: object, where: str = "rope_scaling") -> str:
    """``name`` if it is one of ``ROPE_SCALINGS``; else one line naming it and those."""
    if name not in ROPE_SCALINGS:
        kind = "is not implemented" if name in OTHER_SCALINGS else "is unknown"
        raise UsageError(f"{where} {name!r} {kind} (decoderkit computes {ROPE_SCALINGS})")
    return name


@dataclass(frozen=True)
class RopeSpec:
    """How one head's rotation frequencies are made (an ``LMConfig``'s rope_* fields)."""

    d_k: int  # the rotated width: a head's (even)
    theta: float = 10000.0  # the frequency base
    scaling: str = "default"  # one of ROPE_SCALINGS
    factor: float = 1.0  # linear and llama3: how much longer the context is made
    low_freq_factor: float = 1.0  # llama3: wavelengths past original / this are divided
    high_freq_factor: float = 4.0  # llama3: wavelengths under original / this are kept
    original_max_len: int = 8192  # llama3: the context the model was trained at

    def frequencies(self) -> Tensor:
        """w (d_k / 2,) float32: pair i's angle per position."""
        check_scaling(self.scaling)
        w = 1.0 / self.theta ** (torch.arange(0, self.d_k, 2).float() / self.d_k)
        if self.scaling == "linear":
            return w / self.factor
        if self.scaling == "llama3":
            return self._llama3(w)
        return w

    def _llama3(self, w: Tensor) -> Tensor:
        """Wavelength 2 pi / w over original / low: w / factor; under original / high: w;
        between: (1 - s) w / factor + s w, s = (original / wavelength - low) / (high - low)."""
        wavelength = 2 * math.pi / w
        low, high, n = self.low_freq_factor, self.high_freq_factor, self.original_max_len
        s = (n / wavelength - low) / (high - low)
        between = (1 - s) * w / self.factor + s * w
        long = wavelength > n / low
        return torch.where(long, w / self.factor, torch.where(wavelength < n / high, w, between))


class Rotary(nn.Module):
    """Positions -> the (cos, sin) every attention layer rotates its queries and keys by; the
    frequencies are a buffer made from the spec (no weights)."""

    def __init__(self, spec: RopeSpec):
        super().__init__()
        if spec.d_k % 2:
            raise UsageError(f"RoPE needs an even head width, got d_k={spec.d_k}")
        self.register_buffer("inv_freq", spec.frequencies(), persistent=False)

    def forward(self, positions: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        """positions (B, T) long -> (cos, sin) each (B, 1, T, d_k) of ``dtype``, computed in
        float32 (both halves of a head share pair i's angle)."""
        angles = positions[:, :, None].float() * self.inv_freq.float()  # (B, T, d_k / 2)
        angles = torch.cat((angles, angles), dim=-1)[:, None]  # (B, 1, T, d_k)
        return angles.cos().to(dtype), angles.sin().to(dtype)


def rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """x (B, h, T, d_k) rotated: x cos + rotate_half(x) sin, rotate_half(x) = (-x2, x1) of
    its halves x1, x2."""
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin
