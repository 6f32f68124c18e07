"""Week 3's Llama items, the reference and each named mistake, in float64: the references are
nn's own (``nn.rope``, ``nn.norms.RMSNorm``, ``nn.ffn.GatedFeedForward``,
``nn.attend.attend_heads``); the mistakes' arithmetic is written here.

Legend: B batch, h heads, T positions, d a head's (or the row's) width, F the FFN's width.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from decoderkit.nn.attend import attend_heads
from decoderkit.nn.ffn import GatedFeedForward
from decoderkit.nn.norms import RMSNorm
from decoderkit.nn.rope import Rotary, RopeSpec, rotate


def rope(x: Tensor, positions: Tensor, theta: float, mistake: str | None = None) -> Tensor:
    """x (..., T, d) rotated at ``positions`` (T,) in Hugging Face's rotate-half layout
    (``nn.rope``), or as a mistake rotates it."""
    x = x.double()
    d = x.size(-1)
    if mistake is None:
        cos, sin = Rotary(RopeSpec(d, theta))(positions[None], torch.float64)
        return rotate(x, cos[0, 0], sin[0, 0])
    base = 10000.0 if mistake == "rope_theta_ignored" else theta
    step = 1 if mistake == "rope_frequency" else 2  # exponents i / d, not 2i / d
    w = base ** (-torch.arange(0, d // 2, dtype=torch.float64) * step / d)  # (d/2,)
    angles = positions.double()[:, None] * w  # (T, d/2)
    if mistake == "rope_interleaved":  # pairs (2i, 2i+1), each turned by pair i's angle
        even, odd = x[..., 0::2], x[..., 1::2]
        out = torch.empty_like(x)
        out[..., 0::2] = even * angles.cos() - odd * angles.sin()
        out[..., 1::2] = odd * angles.cos() + even * angles.sin()
        return out
    cos, sin = torch.cat((angles, angles), -1).cos(), torch.cat((angles, angles), -1).sin()
    return rotate(x, cos, -sin if mistake == "rope_rotation_reversed" else sin)


def rms_norm(x: Tensor, weight: Tensor, eps: float, mistake: str | None = None) -> Tensor:
    """g x / sqrt(mean(x^2) + eps) over the last axis (``nn.norms.RMSNorm``), or a mistake."""
    x, weight = x.double(), weight.double()
    if mistake == "rms_mean_subtracted":
        centred = x - x.mean(-1, keepdim=True)
        return weight * centred / torch.sqrt(centred.pow(2).mean(-1, keepdim=True) + eps)
    if mistake == "rms_eps_outside_root":
        return weight * x / (x.pow(2).mean(-1, keepdim=True).sqrt() + eps)
    norm = RMSNorm(x.size(-1), eps).double()
    with torch.no_grad():
        norm.weight.copy_(weight)
        return norm(x)


def swiglu(x: Tensor, gate: Tensor, up: Tensor, down: Tensor,
           mistake: str | None = None) -> Tensor:
    """(silu(x gate^T) * x up^T) down^T (``nn.ffn.GatedFeedForward``: w_1 gate, w_3 up,
    w_2 down; nn.Linear orientation, no biases), or a mistake."""
    x, gate, up, down = (t.double() for t in (x, gate, up, down))
    if mistake == "swiglu_gate_up_swapped":
        return (F.silu(x @ up.T) * (x @ gate.T)) @ down.T
    if mistake == "swiglu_gelu_for_silu":
        return (F.gelu(x @ gate.T) * (x @ up.T)) @ down.T
    ffn = GatedFeedForward(x.size(-1), gate.size(0), bias=False).double()
    with torch.no_grad():
        for linear, w in ((ffn.w_1, gate), (ffn.w_3, up), (ffn.w_2, down)):
            linear.weight.copy_(w)
        return ffn(x)


def repeated_heads(x: Tensor, n_rep: int, mistake: str | None = None) -> Tensor:
    """(B, h_kv, T, d) -> (B, h_kv n_rep, T, d): the values each query head reads in nn's own
    grouped-query attention (``nn.attend.attend_heads`` with h_kv n_rep query heads, every
    query allowed its own position only, so each head's output is its key/value head's rows),
    or tiled (the mistake)."""
    x = x.double()
    if mistake == "kv_heads_tiled":
        return x.repeat(1, n_rep, 1, 1)
    B, h_kv, T, d = x.shape
    own = torch.eye(T, dtype=torch.bool).expand(B, T, T)  # query t sees key t alone
    q = torch.zeros(B, h_kv * n_rep, T, d, dtype=x.dtype)
    return attend_heads(q, torch.zeros_like(x), x, own, 0.0, need_weights=False)[0]
