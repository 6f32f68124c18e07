"""A language model's objective, optimiser, schedule and held-out score.

Next-token cross-entropy summed over the predicted tokens (the loop normalises it); AdamW with
weight decay on matrices only (dim >= 2: linear weights, embeddings; not biases or norms);
linear warm-up then cosine decay; loss and perplexity = exp(loss) on held-out blocks.

Legend: B batch, T block size, V vocabulary size.
"""

from __future__ import annotations

import math
import sys
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.optim.lr_scheduler import LambdaLR

from decoderkit.base.checks import count
from decoderkit.base.errors import UsageError
from decoderkit.nn.modes import evaluating
from decoderkit.nn.lm.model import DecoderOnlyLM


class NextToken(nn.Module):
    """The model and its loss in one forward, so DistributedDataParallel sees them both.

    forward(ids (B, T), labels (B, T)) -> sum over the B*T positions of -log p(label | prefix).
    """

    def __init__(self, model: DecoderOnlyLM):
        super().__init__()
        self.model = model

    def forward(self, ids: Tensor, labels: Tensor) -> Tensor:
        logits = self.model(ids)  # (B, T, V)
        return F.cross_entropy(logits.flatten(0, 1), labels.flatten(), reduction="sum")


def warmup_cosine(done: int, warmup: int, total: int, min_ratio: float) -> float:
    """The rate of optimiser step ``done + 1`` as a fraction of the peak: (done + 1) / warmup
    during the warm-up, then 0.5 (1 + cos(pi r)) decaying to ``min_ratio`` over the steps up
    to ``total`` (r: the fraction of them done), ``min_ratio`` after."""
    if done < warmup:
        return (done + 1) / warmup
    if done >= total:
        return min_ratio
    r = (done - warmup) / max(1, total - warmup)
    return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * r))


def warmup_linear(done: int, warmup: int, total: int) -> float:
    """GPT-1's fine-tuning rate for optimiser step ``done + 1`` as a fraction of the peak:
    (done + 1) / warmup during the warm-up, then linear decay (total - done) / (total - warmup)
    reaching 1 / (total - warmup) at the last step, 0 after."""
    if done < warmup:
        return (done + 1) / warmup
    return max(0.0, (total - done) / max(1, total - warmup))


def decay_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """AdamW parameter groups: ``weight_decay`` on the trainable parameters of dim >= 2
    (matrices, embeddings), none on biases and norm gains."""
    params = [p for p in model.parameters() if p.requires_grad]
    return [{"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
            {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]


def make_adamw(model: nn.Module, *, lr: float, min_lr: float, warmup: int, total: int,
               weight_decay: float, betas: tuple[float, float]
               ) -> tuple[torch.optim.AdamW, LambdaLR]:
    """AdamW with ``weight_decay`` on the parameters of dim >= 2 only, under ``warmup_cosine``
    from ``lr`` down to ``min_lr`` at step ``total``."""
    if not 0 <= min_lr <= lr:
        raise UsageError(f"min_lr must be in [0, lr={lr}], got {min_lr}")
    optimizer = torch.optim.AdamW(decay_groups(model, weight_decay), lr=lr, betas=betas)
    ratio = min_lr / lr
    scheduler = LambdaLR(optimizer, lambda done: warmup_cosine(done, warmup, total, ratio))
    return optimizer, scheduler


@dataclass(frozen=True)
class LMMetrics:
    """Held-out next-token scores."""

    loss: float  # mean -log p per predicted token (nats)
    perplexity: float  # exp(loss); inf past the largest float (a diverged run)
    tokens: int  # predicted tokens scored

    def as_dict(self) -> dict:
        """Field name -> value (one entry of a run's validation history)."""
        return asdict(self)

    def line(self) -> str:
        """The scores on one line for logs."""
        return f"val loss {self.loss:.4f} | perplexity {self.shown_perplexity}"

    @property
    def shown_perplexity(self) -> str:
        """The perplexity as printed: 2 decimals, or 3 significant digits past a million
        (a diverging run's 4.4e+191), 'inf' past the largest float."""
        p = self.perplexity
        return f"{p:.2f}" if p < 1e6 else f"{p:.3g}"


def evaluate_lm(model: DecoderOnlyLM, blocks: list[Tensor], *, batch_size: int) -> LMMetrics:
    """Mean next-token loss of ``model`` over ``blocks`` (each (T + 1,): T inputs, T labels),
    in eval mode, without gradients."""
    count().check("batch_size", batch_size)
    if not blocks:
        raise UsageError("no held-out blocks to evaluate")
    device = next(model.parameters()).device
    total, tokens = 0.0, 0
    with evaluating(model), torch.no_grad():
        for start in range(0, len(blocks), batch_size):
            chunk = torch.stack(blocks[start: start + batch_size]).to(device)  # (B, T + 1)
            total += float(NextToken(model)(chunk[:, :-1], chunk[:, 1:]))
            tokens += chunk[:, 1:].numel()
    loss = total / tokens
    return LMMetrics(loss, perplexity(loss), tokens)


def per_character(loss: float, tokens: int, characters: int) -> float:
    """A mean loss per token as nats per character of a text whose ``characters`` encode to
    ``tokens``: a BPE model's loss on the scale of a character model's (and its goal's)."""
    return loss * tokens / characters


MAX_EXP = math.log(sys.float_info.max)  # about 709.78: exp of more overflows a float


def perplexity(loss: float) -> float:
    """exp(``loss``), inf where that is beyond the largest float (a diverged run's loss), NaN
    for a NaN loss: a value to print, never an OverflowError."""
    return math.exp(loss) if not loss > MAX_EXP else math.inf
