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

Serving several adapters on one base (S-LoRA's, PEFT's mixed batches): a ``MultiLoRALinear``
holds one base and, from each adapter's ``LoRALinear``, its parts' A stacked (r P, in) and its
B's on their rows (out, r P; zeros elsewhere), as two bias-free linears (which
``nn.rowwise`` turns into row-invariant ones, as every other). Inside ``routed``
each forward knows which adapter each position uses: the base runs once on every position,
each adapter's s B A only on its positions (gathered, then ``index_add``-ed back), so a
position's result depends on its adapter alone, not on its companions; no merge.

Legend: r rank, s scale, P parts, N positions.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
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


class MultiLoRALinear(nn.Module):
    """A frozen base linear and several named adapters' updates, each on the positions
    ``route`` gives it (inference: no dropout); without a route, the base alone.

    ``adapters``: name -> that adapter's ``LoRALinear`` on this base (its A, B, parts and
    scale are copied into ``down[k]`` (r P, in) and ``up[k]`` (out, r P))."""

    def __init__(self, base: nn.Module, adapters: dict[str, LoRALinear]):
        super().__init__()
        self.base, self.names = base, list(adapters)
        self.down, self.up = nn.ModuleList(), nn.ModuleList()
        self.scales = [layer.scale for layer in adapters.values()]
        self.sizes = [sum(p.numel() for p in layer.parameters()) - sum(
            p.numel() for p in layer.base.parameters()) for layer in adapters.values()]
        # each adapter's own A and B entries here (down and up hold B's zero rows too)
        self.route: dict[str, Tensor] | None = None  # adapter -> its positions (N,)
        for layer in adapters.values():
            w = layer.weight.detach()
            a = torch.cat([layer.lora_A[n].detach() for n in layer.parts])  # (r P, in)
            b = w.new_zeros(layer.out_features, a.size(0))
            for p, (name, (start, end)) in enumerate(layer.parts.items()):
                b[start:end, p * layer.r:(p + 1) * layer.r] = layer.lora_B[name].detach()
            self.down.append(_frozen_linear(a))
            self.up.append(_frozen_linear(b))

    def forward(self, x: Tensor) -> Tensor:
        """x (..., in) -> x W^T + b, plus s x A^T B^T at each position of a routed adapter."""
        y = self.base(x)
        if not self.route:
            return y
        out = y.shape[-1]
        flat, y = x.reshape(-1, x.shape[-1]), y.reshape(-1, out)
        for k, name in enumerate(self.names):
            at = self.route.get(name)
            if at is not None:
                h = flat.index_select(0, at)
                y.index_add_(0, at, self.up[k](self.down[k](h)) * self.scales[k])
        return y.view(*x.shape[:-1], out)

    def extra_repr(self) -> str:
        return f"adapters={self.names}"


def _frozen_linear(weight: Tensor) -> nn.Linear:
    """A bias-free ``nn.Linear`` holding ``weight`` (out, in), frozen."""
    linear = nn.Linear(weight.size(1), weight.size(0), bias=False, device=weight.device,
                       dtype=weight.dtype)
    linear.weight = nn.Parameter(weight.clone(), requires_grad=False)
    return linear


def served_adapters(model: nn.Module) -> frozenset[str]:
    """The adapter names ``model``'s ``MultiLoRALinear``s hold."""
    return frozenset(n for m in model.modules() if isinstance(m, MultiLoRALinear)
                     for n in m.names)


def check_adapter(name: str | None, known: frozenset[str]) -> None:
    """``name`` is None (the base) or one of the ``known`` adapters; else refused naming them."""
    if name is not None and name not in known:
        raise UsageError(f"adapter {name!r} is not one of this model's "
                         f"({', '.join(sorted(known)) or 'none'})")


@contextmanager
def routed(model: nn.Module, adapters: Sequence[str | None]) -> Iterator[None]:
    """Within it, each forward of ``model`` computes position i (of its N = batch x time
    positions, in order: a step's rows, a packed prefill's positions) with the adapter
    ``adapters[i]`` (None: the base); a model without ``MultiLoRALinear``s is left as it is."""
    layers = [m for m in model.modules() if isinstance(m, MultiLoRALinear)]
    if not layers:
        check_adapter(next((a for a in adapters if a is not None), None), frozenset())
        yield
        return
    check_adapter(next((a for a in adapters if a is not None and not any(
        a in m.names for m in layers)), None), served_adapters(model))
    groups: dict[str, list[int]] = {}
    for i, name in enumerate(adapters):
        if name is not None:
            groups.setdefault(name, []).append(i)
    device = next(model.parameters()).device
    route = {n: torch.tensor(at, device=device) for n, at in groups.items()}
    for m in layers:
        m.route = route
    try:
        yield
    finally:
        for m in layers:
            m.route = None
