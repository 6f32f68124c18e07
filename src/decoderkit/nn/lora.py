"""Low-rank adapters (LoRA, Hu et al. 2021) on a model's linears, PEFT's adapter layer.

A targeted linear y = x W^T + b becomes y = x W^T + b + s dropout(x) A^T B^T, W (out, in)
frozen, A (r, in) and B (out, r) trained, s = alpha / r (rsLoRA: alpha / sqrt(r)). PEFT's
initialisation: A Kaiming-uniform (a = sqrt(5), ``nn.Linear``'s own), B zeros, so step 0
computes exactly the base model. ``merge`` folds s B A into W (inference at the base's cost),
``unmerge`` takes it out again.

One of our linears may hold several of the Hugging Face model's: a packed ``in_proj`` is
Llama's q_proj, k_proj and v_proj, rows one after the other. A ``LoRALinear`` therefore adapts
named row ranges (``parts``) of its base, each with its own A and B: q and v adapted, k not,
as PEFT adapts the separate modules. A whole linear is one part covering every row.

Legend: r rank, s scale, P parts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from decoderkit.base.checks import (
    FRACTION,
    POSITIVE,
    check_bools,
    check_choice,
    check_fields,
    count,
)
from decoderkit.base.errors import UsageError

ALL_LINEAR = "all-linear"  # PEFT's shorthand: every linear but the output head
RANK = count(1, 1 << 14)  # r: at most min(in, out) on a linear (``check_rank``), which is
# under 16,384 for every model decoderkit builds a preset of
BIASES = ("none",)  # PEFT's bias option: biases stay frozen (the only one taken)


@dataclass(frozen=True)
class LoRAConfig:
    """An adapter's settings (PEFT's ``LoraConfig``, the fields its adapter_config.json
    holds); saved beside every adapter."""

    r: int = 8  # rank of B A (litgpt's and PEFT's default: 8)
    alpha: float = 16.0  # lora_alpha: the update is scaled by alpha / r (litgpt's 16)
    dropout: float = 0.0  # lora_dropout on the adapter's input (PEFT's default 0)
    targets: tuple[str, ...] | None = None  # Hugging Face module names ("q_proj") or
    # ("all-linear",); None: PEFT's default for the architecture (Llama q_proj, v_proj; GPT-2
    # c_attn)
    rslora: bool = False  # use_rslora: scale alpha / sqrt(r) (Kalajdzievski 2023)

    def __post_init__(self):
        check_fields(self, {"r": RANK, "alpha": POSITIVE, "dropout": FRACTION})
        check_bools(self, ("rslora",))
        if self.targets is not None:
            check_target_names(self.targets)

    @property
    def scale(self) -> float:
        """s: alpha / r, or alpha / sqrt(r) with rsLoRA."""
        return lora_scale(self.alpha, self.r, self.rslora)


def lora_scale(alpha: float, r: int, rslora: bool = False) -> float:
    """The one scale rule: s = alpha / r (PEFT's ``scaling``), alpha / sqrt(r) with rsLoRA."""
    return alpha / math.sqrt(r) if rslora else alpha / r


def check_target_names(targets: object) -> tuple[str, ...]:
    """``targets`` as a non-empty tuple of module names (``ALL_LINEAR`` alone, or names)."""
    if isinstance(targets, str) or not isinstance(targets, (list, tuple)) or not targets \
            or not all(isinstance(t, str) and t for t in targets):
        raise UsageError(f"targets must be a non-empty list of module names (or "
                         f"{ALL_LINEAR!r}), got {targets!r}")
    if ALL_LINEAR in targets and len(targets) > 1:
        raise UsageError(f"targets: {ALL_LINEAR!r} stands alone, got {list(targets)}")
    return tuple(targets)


def check_rank(r: int, name: str, d_in: int, d_out: int) -> None:
    """The rank of an adapter on the linear ``name`` (d_in -> d_out): 1 <= r <= min(in, out)
    (a larger B A has no more rank, only more numbers)."""
    if not 1 <= r <= min(d_in, d_out):
        raise UsageError(f"r must be in [1, {min(d_in, d_out)}] for {name} ({d_in} -> "
                         f"{d_out}: at most min(in, out)), got {r}")


class LoRALinear(nn.Module):
    """A frozen ``nn.Linear`` (``base``) plus s dropout(x) A_p^T B_p^T on each part p's rows.

    ``parts``: name -> (first row, end row) of the base's output; each gets ``lora_A[name]``
    (r, in) and ``lora_B[name]`` (rows, r). x (..., in) -> (..., out). ``weight`` and ``bias``
    are the base's (what code reading a linear's weight sees, as PEFT's layer gives).
    """

    def __init__(self, base: nn.Linear, parts: dict[str, tuple[int, int]], config: LoRAConfig):
        super().__init__()
        if not isinstance(base, nn.Linear):
            raise TypeError(f"base must be an nn.Linear, got {type(base).__name__}")
        self.base, self.parts = base, dict(parts)
        self.r, self.scale = config.r, config.scale
        self.dropout = nn.Dropout(config.dropout) if config.dropout else nn.Identity()
        self.merged = False
        w = base.weight
        self.lora_A, self.lora_B = nn.ParameterDict(), nn.ParameterDict()
        for name, (start, end) in self.parts.items():
            check_rank(config.r, name, base.in_features, end - start)
            a = torch.empty(config.r, base.in_features, dtype=w.dtype, device=w.device)
            nn.init.kaiming_uniform_(a, a=math.sqrt(5))  # PEFT's (nn.Linear's) A
            self.lora_A[name] = nn.Parameter(a)
            self.lora_B[name] = nn.Parameter(w.new_zeros(end - start, config.r))
        for p in base.parameters():
            p.requires_grad_(False)

    @property
    def weight(self) -> Tensor:
        return self.base.weight

    @property
    def bias(self) -> Tensor | None:
        return self.base.bias

    @property
    def in_features(self) -> int:
        return self.base.in_features

    @property
    def out_features(self) -> int:
        return self.base.out_features

    def delta(self, name: str) -> Tensor:
        """Part ``name``'s s B A (rows, in): what merging adds to its rows of W."""
        return self.scale * (self.lora_B[name] @ self.lora_A[name])

    def forward(self, x: Tensor) -> Tensor:
        """x (..., in) -> x W^T + b + each part's s dropout(x) A^T B^T on its rows."""
        y = self.base(x)
        if self.merged:
            return y
        h = self.dropout(x)
        if len(self.parts) == 1 and self._whole():
            (name,) = self.parts
            return y + F.linear(F.linear(h, self.lora_A[name]), self.lora_B[name]) * self.scale
        for name, (start, end) in self.parts.items():
            y[..., start:end] += F.linear(F.linear(h, self.lora_A[name]),
                                          self.lora_B[name]) * self.scale
        return y

    def _whole(self) -> bool:
        (start, end), = self.parts.values()
        return start == 0 and end == self.base.out_features

    @torch.no_grad()
    def merge(self) -> None:
        """W <- W + s B A on each part's rows; a second merge does nothing (as PEFT's)."""
        if self.merged:
            return
        for name, (start, end) in self.parts.items():
            self.base.weight[start:end] += self.delta(name).to(self.base.weight.dtype)
        self.merged = True

    @torch.no_grad()
    def unmerge(self) -> None:
        """W <- W - s B A: the base again (to rounding); unmerged, nothing to do."""
        if not self.merged:
            return
        for name, (start, end) in self.parts.items():
            self.base.weight[start:end] -= self.delta(name).to(self.base.weight.dtype)
        self.merged = False

    def extra_repr(self) -> str:
        return f"parts={list(self.parts)}, r={self.r}, scale={self.scale:g}"


def trainable(model: nn.Module) -> list[nn.Parameter]:
    """The parameters an optimiser is given: those that want gradients (an adapted model's
    A and B alone), so a frozen base has no gradient and no optimiser state."""
    return [p for p in model.parameters() if p.requires_grad]


def check_bias(value: object) -> str:
    """PEFT's ``bias`` setting: "none" alone (biases stay the base's)."""
    check_choice("bias", value, BIASES)
    return value
