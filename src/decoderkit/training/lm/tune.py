"""``lm tune``'s recipe for the one training loop: a pretrained LM taught a task on its own
examples (``training.lm.tune_data``), by LoRA (``nn.lm.lora``: the base frozen, only A and B
trained and kept in the optimiser) or, ``full``, every weight.

The next-token loss over the tokens each example trains (summed; the loop divides by their
count), AdamW (litgpt's lr 3e-4) under warm-up then cosine decay, the held-out loss at each
validation, the best state kept. The run directory's format is the caller's (``TuneStore``:
a PEFT adapter for LoRA, an ``lm train`` run for full tuning, both in ``interop``), so that
this layer writes no foreign format itself.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from decoderkit.base.checks import (
    FRACTION,
    POSITIVE,
    RATE,
    SEED,
    WEIGHT,
    check_choice,
    check_fields,
    size,
    count,
)
from decoderkit.base.errors import UsageError
from decoderkit.base.files import files_sha256
from decoderkit.nn.lm.model import DecoderOnlyLM
from decoderkit.nn.lm.lora import add_lora, add_token_rows
from decoderkit.nn.lora import LoRAConfig
from decoderkit.nn.modes import evaluating
from decoderkit.training import distributed, loop
from decoderkit.training.lm.fit import report_best, text_meta
from decoderkit.training.lm.objective import LMMetrics, make_adamw, perplexity
from decoderkit.training.lm.tune_data import IGNORE, LOSSES, Example, collate
from decoderkit.training.resume import MAY_CHANGE, check_settings


@dataclass(frozen=True)
class TuneConfig:
    """How to tune a pretrained LM; ``decoderkit lm tune --help`` explains each flag."""

    batch_size: int = 8  # examples per micro-batch (per process)
    accum: int = 1  # micro-batches per optimiser step
    max_steps: int = 200  # optimiser steps in all (a resumed run counts the earlier ones)
    time_limit: float | None = None  # seconds of training in this invocation, then stop
    lr: float = 3e-4  # peak learning rate (litgpt's LoRA default)
    min_lr: float = 3e-5  # the rate at the end of the cosine decay
    warmup: int = 10  # linear warm-up steps
    weight_decay: float = 0.0  # AdamW decay on matrices (PEFT's examples: none)
    beta2: float = 0.999  # AdamW's second-moment decay (beta1 is 0.9)
    clip: float | None = 1.0  # max gradient norm; None: no clipping
    valid_every: int = 50  # steps between validations
    patience: int = 0  # stop after this many validations without a lower loss; 0: never
    loss: str = "assistant"  # which tokens carry the loss: assistant, all or last
    seed: int = 0  # adapter initialisation, dropout and batch order

    def __post_init__(self):
        check_fields(self, TUNE_RANGES, optional=("time_limit", "clip"))
        check_choice("loss", self.loss, LOSSES)


TUNE_RANGES = {"batch_size": size(), "accum": size(), "max_steps": count(),
               "time_limit": POSITIVE, "lr": RATE, "min_lr": WEIGHT, "warmup": count(0),
               "weight_decay": WEIGHT, "beta2": FRACTION, "clip": POSITIVE,
               "valid_every": count(), "patience": count(0), "seed": SEED}


class TuneStore(Protocol):
    """The run directory's format (``interop``): what ``lm tune`` writes and resumes."""

    files: tuple[str, ...]  # the files it owns

    def save(self, out: Path, model: DecoderOnlyLM, step: int, meta: dict,
             trainer_state: dict) -> None:
        """Write the checkpoint (the adapter alone, or the whole model)."""

    def load(self, out: Path, device: torch.device) -> tuple[DecoderOnlyLM, dict, dict | None]:
        """(the model as saved, trainable as tuned; its meta; its trainer state)."""


@dataclass
class TuneData:
    """The examples to learn from and to validate on, and where they came from."""

    train: list[Example]
    valid: list[Example]
    kind: str  # chat, prompt/completion or text
    files: list[str]  # the data files, in order (recorded with their sha256)


class MaskedNextToken(nn.Module):
    """forward(ids (B, T), labels (B, T)) -> the summed next-token loss over the labels that
    are not ``IGNORE``."""

    def __init__(self, model: DecoderOnlyLM):
        super().__init__()
        self.model = model

    def forward(self, ids: Tensor, labels: Tensor) -> Tensor:
        logits = self.model(ids)  # (B, T, V)
        return F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=IGNORE,
                               reduction="sum")


def adapted(base: DecoderOnlyLM, lora: LoRAConfig | None, new_tokens: list[int] = ()
            ) -> DecoderOnlyLM:
    """``base`` made trainable for tuning: LoRA adapters on its targets and the rows of
    ``new_tokens`` (PEFT's trainable tokens; the rest frozen), or with ``lora`` None every
    weight."""
    if lora is None:
        for p in base.parameters():
            p.requires_grad_(True)
    else:
        add_lora(base, lora)
        if new_tokens:
            add_token_rows(base, list(new_tokens))
    return base.train()


def tune_loss(model: DecoderOnlyLM, examples: list[Example], batch_size: int) -> LMMetrics:
    """The mean loss per trained token of ``model`` on ``examples``, in eval mode."""
    if not examples:
        raise UsageError("no held-out examples to validate on")
    device = next(model.parameters()).device
    total, tokens = 0.0, 0
    objective = MaskedNextToken(model)
    with evaluating(model), torch.no_grad():
        for start in range(0, len(examples), batch_size):
            batch = collate(examples[start:start + batch_size]).to(device)
            total += float(objective(*batch.inputs))
            tokens += batch.n_tokens
    return LMMetrics(total / tokens, perplexity(total / tokens), tokens)


class Tuning:
    """``lm tune``'s ``training.loop.Recipe``."""

    keep_best = True  # the run directory holds the best held-out state
    ema_decay = None

    def __init__(self, base: Callable[[], DecoderOnlyLM], lora: LoRAConfig | None,
                 cfg: TuneConfig, data: TuneData, store: TuneStore, new_tokens: list[int] = ()):
        self.base, self.lora, self.cfg, self.data, self.store = base, lora, cfg, data, store
        self.files, self.new_tokens = store.files, list(new_tokens)

    def new_model(self) -> DecoderOnlyLM:
        return adapted(self.base(), self.lora, self.new_tokens)

    def resume(self, out: Path, device: torch.device):
        model, meta, trainer_state = self.store.load(out, device)
        check_settings(self.cfg, meta.get("train", {}), out, MAY_CHANGE)
        if meta.get("text_sha256") not in (None, files_sha256(self.data.files)):
            raise UsageError(f"cannot resume: the data ({', '.join(self.data.files)}) is not "
                             f"what the run in {out} was tuned on (sha256 differs)")
        return model.train(), meta["step"], meta.get("history", []), trainer_state

    def objective(self, model: DecoderOnlyLM) -> MaskedNextToken:
        return MaskedNextToken(model)

    def optimizer(self, model: DecoderOnlyLM):
        c = self.cfg
        return make_adamw(model, lr=c.lr, min_lr=min(c.min_lr, c.lr), warmup=c.warmup,
                          total=c.max_steps, weight_decay=c.weight_decay, betas=(0.9, c.beta2))

    def batches(self, start: int, ctx: distributed.Context):
        train, c = self.data.train, self.cfg

        def batch(number: int):
            pick = random.Random(c.seed * 1_000_003 + number)  # a function of the number
            return collate([train[pick.randrange(len(train))] for _ in range(c.batch_size)])

        return loop.rank_batches(start, ctx, batch)

    def validate(self, model: DecoderOnlyLM) -> LMMetrics:
        return tune_loss(model, self.data.valid, 2 * self.cfg.batch_size)

    def stop_reason(self, metrics: LMMetrics, bad: int) -> str | None:
        return loop.patience_spent(self.cfg.patience, bad)

    def meta(self, out: Path) -> dict:
        return {**text_meta(self.data.files, out), "data_kind": self.data.kind,
                "examples": {"train": len(self.data.train), "valid": len(self.data.valid)},
                "method": "full" if self.lora is None else "lora"}

    def save(self, out: Path, model: DecoderOnlyLM, step: int, meta: dict,
             trainer_state: dict) -> None:
        self.store.save(out, model, step, meta, trainer_state)

    def report(self, metrics: LMMetrics, step: int, out: Path) -> None:
        report_best(metrics, step, out, "tuned")
