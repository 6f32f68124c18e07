"""The training objective, schedule and step: label-smoothed cross-entropy, the warm-up rate,
Adam, and one optimiser step with gradient accumulation normalised by real target tokens (each
family's module of the loss: ``training.seq2seq.objective``, ``training.lm.objective``).

Legend: N target tokens (batch x length, flattened), B batch, T target length, d = d_model,
V vocabulary size.
"""

from __future__ import annotations

import math
from contextlib import nullcontext

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.optim.lr_scheduler import LambdaLR

from decoderkit.base import moved
from decoderkit.base.errors import UsageError

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
            raise UsageError(f"smoothing must be a float in [0, 1), got {smoothing!r}")
        if convention not in CONVENTIONS:
            raise UsageError(f"convention must be one of {CONVENTIONS}, got {convention!r}")
        if reduction not in REDUCTIONS:
            raise UsageError(f"reduction must be one of {REDUCTIONS}, got {reduction!r}")
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
            raise UsageError(f"the exclusive convention needs V >= 2 classes, got V={vocab}")
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
            raise UsageError(f"log_probs must have shape (N, V), got {tuple(log_probs.shape)}")
        if target.shape != log_probs.shape[:1]:
            raise UsageError(f"target must have shape ({log_probs.size(0)},), "
                             f"got {tuple(target.shape)}")
        vocab = log_probs.size(1)
        keep = self._kept(target, vocab)  # (N,)
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

    def from_logits(self, logits: Tensor, target: Tensor) -> Tensor:
        """The same loss of unnormalised scores: logits (N, V), target (N,) -> loss (scalar,
        or (N,)), equal to ``forward(logits.log_softmax(-1), target)``. The uniform convention
        is ``F.cross_entropy``'s own label smoothing, one fused kernel (no (N, V) smoothed
        target, floor or gather of the log-probabilities kept for the backward pass)."""
        if self.convention != "uniform" or logits.dim() != 2 or \
                target.shape != logits.shape[:1]:
            return self(logits.log_softmax(-1), target)  # its shape checks and messages
        keep = self._kept(target, logits.size(1))
        loss = F.cross_entropy(logits, target, reduction=self.reduction,
                               ignore_index=-100 if self.ignore_index is None
                               else self.ignore_index, label_smoothing=self.smoothing)
        if self.reduction == "mean" and not keep.any():
            return loss.nan_to_num(0.0)  # no targets: 0, as forward's mean
        return loss

    def _kept(self, target: Tensor, vocab: int) -> Tensor:
        """The targets that count (N,) bool: not ``ignore_index``; an id outside [0, vocab)
        among them is refused by name."""
        keep = (torch.ones_like(target, dtype=torch.bool) if self.ignore_index is None
                else target != self.ignore_index)  # (N,)
        bad = keep & ((target < 0) | (target >= vocab))
        if bad.any():
            raise UsageError(f"target id {int(target[bad][0])} is outside the vocabulary "
                             f"[0, {vocab})")
        return keep


def noam_rate(step: int, d_model: int, warmup: int = 4000, factor: float = 1.0) -> float:
    """The paper's rate: factor * d^-0.5 * min(s^-0.5, s * w^-1.5), for steps s >= 1.

    Rises linearly for ``warmup`` steps, peaks at s = w, then decays as s^-0.5.
    Step 0 is undefined (0^-0.5) and raises ``ValueError``.
    """
    for name, value in (("step", step), ("d_model", d_model), ("warmup", warmup)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise UsageError(f"{name} must be an int >= 1, got {value!r}")
    return factor * d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)


def make_optimizer(model: nn.Module, d_model: int, warmup: int, factor: float = 1.0,
                   ) -> tuple[torch.optim.Adam, LambdaLR]:
    """Adam(0.9, 0.98, 1e-9) with lr(step) = noam_rate(step) for optimiser steps 1, 2, ..."""
    optimizer = torch.optim.Adam(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9)
    scheduler = LambdaLR(optimizer, lambda done: noam_rate(done + 1, d_model, warmup, factor))
    return optimizer, scheduler


def train_step(module: nn.Module, batches: list, optimizer: torch.optim.Optimizer,
               scheduler: LambdaLR, *, clip: float | None, total_tokens: int,
               scale: float = 1.0) -> float:
    """One optimiser step over ``batches`` (gradient accumulation).

    Returns this process's loss per real target token (sum over ``batches`` / their n_tokens).
    A batch (``data.Batch``, ``lm_data.LMBatch``) gives ``module`` its ``inputs``.

    Every micro-batch's summed loss is divided by ``total_tokens`` (the real target tokens of
    the whole step), so accumulating k micro-batches equals one step on their union.
    ``scale`` multiplies the loss before backward: world size under DDP, which averages
    gradients across processes while the token count is already global.
    """
    if total_tokens < 1:
        raise UsageError(f"total_tokens must be >= 1, got {total_tokens}")
    loss_sum = 0.0
    for i, b in enumerate(batches):
        sync = i == len(batches) - 1
        context = module.no_sync() if hasattr(module, "no_sync") and not sync else nullcontext()
        with context:
            loss = module(*b.inputs)
            (loss * (scale / total_tokens)).backward()
        loss_sum += float(loss.detach())
    if clip:
        torch.nn.utils.clip_grad_norm_(module.parameters(), clip)
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    return loss_sum / sum(b.n_tokens for b in batches)


def check_diverged(loss: float, step: int, out) -> None:
    """Stop a run whose held-out ``loss`` is no longer finite (its weights overflowed: NaN
    weights a later load would refuse) before it is saved over the last good checkpoint in
    ``out``: one ``UsageError`` naming the step and what to lower."""
    if not math.isfinite(loss):
        raise UsageError(f"the run diverged: validation loss {loss} at step {step}, not saved "
                         f"({out} keeps its last checkpoint, if any); lower the learning rate "
                         "(--lr, --lr-factor) or clip the gradients (--clip)")


__getattr__ = moved.forward(__name__)  # TeacherForced: moved to training.seq2seq.objective
