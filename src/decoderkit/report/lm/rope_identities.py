"""RoPE's identities recomputed with ``nn.rope`` (for ``conformance``, beside the sinusoid
ones of ``seed_claims.seed000_positions``): a query's score with a key depends on their offset
alone, the rotation keeps every vector's norm, rotate-half is a complex multiplication of the
pairs (i, i + d/2) by e^(i p w_i), and w_i = theta^(-2i/d). Float64 inputs; the angles are
nn.rope's float32 ones (as Hugging Face's), hence the 1e-4 on scores of size d.

Legend: T positions, d a head's width.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from decoderkit.nn.rope import Rotary, RopeSpec, rotate
from decoderkit.report.rows import Row, near

D, THETA, SHIFT = 16, 10000.0, 37  # head width, Llama 2's base, the offset-free shift


def _rotated(x: torch.Tensor, positions: list[int], theta: float = THETA) -> torch.Tensor:
    """x (T, d) float64, row t rotated at positions[t] by nn.rope."""
    cos, sin = Rotary(RopeSpec(x.size(-1), theta))(torch.tensor([positions]), torch.float64)
    return rotate(x[None, None], cos, sin)[0, 0]


def consistency_rope() -> Iterator[Row]:
    """RoPE identities (nn.rope): offset-only scores, norms kept, complex form, theta^(-2i/d)"""
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(2, D, generator=g, dtype=torch.float64)
    pairs = [(p, p2) for p in (0, 5, 20) for p2 in (0, 3, 20)]  # (query, key) positions
    near_scores = [(_rotated(torch.stack([q, k]), [p, p2]).prod(0).sum(),
                    _rotated(torch.stack([q, k]), [p + SHIFT, p2 + SHIFT]).prod(0).sum())
                   for p, p2 in pairs]
    yield near("self", f"RoPE q(p).k(p') = q(p+{SHIFT}).k(p'+{SHIFT})",
               [a.item() for a, _ in near_scores], [b.item() for _, b in near_scores], 1e-4)
    x = torch.randn(50, D, generator=g, dtype=torch.float64)
    turned = _rotated(x, list(range(50)))
    yield near("self", "RoPE keeps every norm: |R(p) x| = |x|", x.norm(dim=-1),
               turned.norm(dim=-1), 1e-6)
    cos, sin = Rotary(RopeSpec(D, THETA))(torch.arange(50)[None], torch.float64)
    half = D // 2
    z = torch.complex(x[:, :half], x[:, half:]) * torch.complex(cos[0, 0, :, :half],
                                                                 sin[0, 0, :, :half])
    yield near("self", "RoPE rotate-half = (x1 + i x2) e^(i p w)",
               torch.cat((z.real, z.imag), -1), rotate(x, cos[0, 0], sin[0, 0]), 1e-12)
    for theta in (THETA, 500000.0):
        i = torch.arange(half, dtype=torch.float64)
        yield near("self", f"RoPE w_i = theta^(-2i/d), theta {theta:g}",
                   theta ** (-2 * i / D), RopeSpec(D, theta).frequencies().double(), 1e-7)
