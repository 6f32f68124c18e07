"""The layer norms a block may have: LayerNorm, the Annotated Transformer's variant, and the
Llama family's RMSNorm (scale only, no mean subtracted).

Legend: d the normalised width (d_model, or a head's d_k for Qwen3's q/k norms).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from decoderkit.base.checks import check_choice

LAYER_NORMS = ("standard", "annotated")  # a translation model's (``ModelConfig.layer_norm``)
NORM_KINDS = (*LAYER_NORMS, "rms")  # every block's: ``make_norm``
RMS_EPS = 1e-6  # Llama's rms_norm_eps default


class LayerNorm(nn.LayerNorm):
    """y = gamma * (x - mean) / sqrt(var + eps) + beta over the last axis.

    Population (biased) variance, eps inside the square root: ``nn.LayerNorm`` numerics.
    Parameters: 2 d (gamma, beta), or d without beta (``bias=False``, as torch's bias=False layers).
    """

    def __init__(self, d: int, eps: float = 1e-5, bias: bool = True):
        super().__init__(d, eps=eps, bias=bias)


class AnnotatedLayerNorm(nn.Module):
    """The Annotated Transformer's variant: y = a * (x - mean) / (std + eps) + b.

    Unbiased (n - 1) standard deviation, eps added to the std, not the variance.
    """

    def __init__(self, d: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.bias = nn.Parameter(torch.zeros(d))
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:
        """x (..., d) -> (..., d), normalised over the last axis."""
        mean = x.mean(-1, keepdim=True)
        std = x.std(-1, keepdim=True)  # unbiased
        return self.weight * (x - mean) / (std + self.eps) + self.bias


def make_norm(kind: str, d: int, bias: bool = True, eps: float | None = None) -> nn.Module:
    """The layer norm named by ``kind``: "standard" (LayerNorm; ``bias=False``: no beta, as
    nanoGPT's bias=False), "annotated" or "rms" (``nn.norms.RMSNorm``, never a beta); ``eps``
    None: each one's own default."""
    check_choice("layer_norm", kind, NORM_KINDS)
    if kind == "rms":
        return RMSNorm(d) if eps is None else RMSNorm(d, eps)
    if kind == "annotated":
        return AnnotatedLayerNorm(d) if eps is None else AnnotatedLayerNorm(d, eps)
    return LayerNorm(d, bias=bias) if eps is None else LayerNorm(d, eps, bias)


class RMSNorm(nn.Module):
    """y = g * x / sqrt(mean(x^2) + eps) over the last axis (Zhang and Sennrich, 2019).

    Computed in float32 whatever x's dtype (as Hugging Face's Llama), then cast back before
    the scale g. Parameters: d (g, no beta).
    """

    def __init__(self, d: int, eps: float = RMS_EPS):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:
        """x (..., d) -> (..., d)."""
        wide = x.to(torch.float32) if x.dtype in (torch.float16, torch.bfloat16) else x
        y = wide * torch.rsqrt(wide.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * y.to(x.dtype)
