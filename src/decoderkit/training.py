"""The training objective and schedule: label-smoothed cross-entropy and the warm-up rate.

Legend: N target tokens (batch x length, flattened), V vocabulary size.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

CONVENTIONS = ("uniform", "exclusive")
REDUCTIONS = ("mean", "sum", "none")


class LabelSmoothingLoss(nn.Module):
    """Cross-entropy H(q, p) = -sum_i q_i log p_i against a smoothed target distribution q.

    ``uniform``:   q_i = (1 - eps) 1[i = y] + eps / V       (the paper; ``F.cross_entropy``'s).
    ``exclusive``: q_y = 1 - eps, q_i = eps / (V - 1) for i != y.
    Targets equal to ``ignore_index`` (padding) contribute nothing; ``mean`` divides by the
    number of other targets (0 when there are none). A log-probability of -inf (a probability
    that underflowed to 0) is read as log(smallest normal float), so the loss stays finite.
    """

    def __init__(self, smoothing: float = 0.1, convention: str = "uniform",
                 ignore_index: int | None = 0, reduction: str = "mean"):
        super().__init__()
        if not isinstance(smoothing, (int, float)) or not 0.0 <= smoothing < 1.0:
            raise ValueError(f"smoothing must be a float in [0, 1), got {smoothing!r}")
        if convention not in CONVENTIONS:
            raise ValueError(f"convention must be one of {CONVENTIONS}, got {convention!r}")
        if reduction not in REDUCTIONS:
            raise ValueError(f"reduction must be one of {REDUCTIONS}, got {reduction!r}")
        self.smoothing = float(smoothing)
        self.convention = convention
        self.ignore_index = ignore_index
        self.reduction = reduction

    def _weights(self, vocab: int) -> tuple[float, float]:
        """(mass on the gold class, mass on each other class)."""
        eps = self.smoothing
        if self.convention == "uniform":
            return 1.0 - eps + eps / vocab, eps / vocab
        if vocab < 2:
            raise ValueError(f"the exclusive convention needs V >= 2 classes, got V={vocab}")
        return 1.0 - eps, eps / (vocab - 1)

    def target_distribution(self, target: Tensor, vocab: int) -> Tensor:
        """The smoothed q for each target: (N,) -> (N, V); ignored rows are all zero."""
        gold, other = self._weights(vocab)
        q = torch.full((target.numel(), vocab), other, dtype=torch.float64)  # (N, V)
        q[torch.arange(target.numel()), target.clamp(0, vocab - 1)] = gold
        if self.ignore_index is not None:
            q[target == self.ignore_index] = 0.0
        return q

    def forward(self, log_probs: Tensor, target: Tensor) -> Tensor:
        """log_probs (N, V) from the generator, target (N,) ids -> loss (scalar, or (N,))."""
        if log_probs.dim() != 2:
            raise ValueError(f"log_probs must have shape (N, V), got {tuple(log_probs.shape)}")
        if target.shape != log_probs.shape[:1]:
            raise ValueError(f"target must have shape ({log_probs.size(0)},), "
                             f"got {tuple(target.shape)}")
        vocab = log_probs.size(1)
        keep = (torch.ones_like(target, dtype=torch.bool) if self.ignore_index is None
                else target != self.ignore_index)  # (N,)
        bad = keep & ((target < 0) | (target >= vocab))
        if bad.any():
            raise ValueError(f"target id {int(target[bad][0])} is outside the vocabulary "
                             f"[0, {vocab})")
        floor = math.log(torch.finfo(log_probs.dtype).tiny)
        lp = torch.where(log_probs == -math.inf, floor, log_probs)  # (N, V)
        gold_w, other_w = self._weights(vocab)
        gold = lp.gather(1, target.clamp(0, vocab - 1)[:, None]).squeeze(1)  # (N,)
        # sum_i q_i lp_i = gold_w lp_y + other_w (sum_i lp_i - lp_y)
        loss = -((gold_w - other_w) * gold + other_w * lp.sum(1))  # (N,)
        loss = loss.masked_fill(~keep, 0.0)
        if self.reduction == "none":
            return loss
        if self.reduction == "sum":
            return loss.sum()
        return loss.sum() / keep.sum().clamp(min=1)


def noam_rate(step: int, d_model: int, warmup: int = 4000, factor: float = 1.0) -> float:
    """The paper's rate: factor * d^-0.5 * min(s^-0.5, s * w^-1.5), for steps s >= 1.

    Rises linearly for ``warmup`` steps, peaks at s = w, then decays as s^-0.5.
    Step 0 is undefined (0^-0.5) and raises ``ValueError``.
    """
    for name, value in (("step", step), ("d_model", d_model), ("warmup", warmup)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be an int >= 1, got {value!r}")
    return factor * d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)
