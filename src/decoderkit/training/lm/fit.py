"""The language model's training run: its recipe for ``training.loop`` (the one loop the
encoder-decoder trains on too): next-token loss on random contiguous windows of the training
text, AdamW (decay on matrices only) under warm-up then cosine decay, held-out loss and
perplexity, and a checkpoint each time the held-out loss falls. ``decoderkit lm train`` is a
thin wrapper over this.

A run directory records its text files (paths relative to it) and their sha256: resuming on
changed text, or with another model or block size, is refused, naming what differs.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import torch

from decoderkit.base.checks import (
    FRACTION,
    MODEL_SIZES,
    POSITIVE,
    RATE,
    SEED,
    WEIGHT,
    check_fields,
    check_step_tokens,
    count,
    size,
)
from decoderkit.base.errors import UsageError
from decoderkit.base.files import files_sha256
from decoderkit.nn.lm.model import DecoderOnlyLM, LMConfig
from decoderkit.training import distributed, loop
from decoderkit.training.resume import (
    MAY_CHANGE as EVERY_RUN_MAY_CHANGE,
    check_same,
    check_settings,
)
from decoderkit.training.checkpoint_dir import read_meta
from decoderkit.training.lm.checkpoint import FILES, load_lm_checkpoint, save_lm_checkpoint
from decoderkit.training.lm.data import LMData, eval_blocks, random_batch
from decoderkit.training.lm.objective import LMMetrics, NextToken, evaluate_lm, make_adamw


@dataclass(frozen=True)
class LMTrainConfig:
    """How to train a language model; ``decoderkit lm train --help`` explains each flag."""

    block_size: int = 64  # tokens of context per training window (<= the model's max_len)
    batch_size: int = 12  # windows per micro-batch (per process)
    accum: int = 1  # micro-batches per optimiser step
    max_steps: int = 5000  # optimiser steps in all (a resumed run counts the earlier ones)
    time_limit: float | None = None  # seconds of training in this invocation, then stop
    lr: float = 1e-3  # peak learning rate, reached after the warm-up
    min_lr: float = 1e-4  # rate at the end of the cosine decay (at max_steps)
    warmup: int = 100  # linear warm-up steps
    weight_decay: float = 0.1  # AdamW decay on matrices (dim >= 2) only
    beta2: float = 0.99  # AdamW's second-moment decay (beta1 is 0.9)
    clip: float | None = 1.0  # max gradient norm; None: no clipping
    valid_every: int = 250  # steps between validations
    eval_blocks: int = 200  # held-out blocks per validation (evenly spaced; all if fewer)
    patience: int = 0  # stop after this many validations without a lower loss; 0: never
    seed: int = 0  # initialisation, dropout and batch order

    def __post_init__(self):
        check_fields(self, LM_TRAIN_RANGES, optional=("time_limit", "clip"))
        check_step_tokens(self.batch_size, self.accum, self.block_size,
                          "batch_size x accum x block_size")


LM_TRAIN_RANGES = {  # what each field accepts (the lm train command's flags use these)
    "block_size": MODEL_SIZES["max_len"], "batch_size": size(), "accum": size(),
    "max_steps": count(), "time_limit": POSITIVE, "lr": RATE, "min_lr": WEIGHT,
    "warmup": count(0), "weight_decay": WEIGHT, "beta2": FRACTION,
    "clip": POSITIVE, "valid_every": count(), "eval_blocks": size(), "patience": count(0),
    "seed": SEED}


MAY_CHANGE = (*EVERY_RUN_MAY_CHANGE, "eval_blocks")  # what --resume may set anew


def lm_fit(config: LMConfig, cfg: LMTrainConfig, data: LMData, out: str | Path, *,
           resume: bool = False, overwrite: bool = False, device: str = "auto",
           show: bool = True, progress: bool = True,
           commands: list[list[str]] | None = None) -> loop.LoopResult:
    """Train a ``DecoderOnlyLM(config)`` on ``data``, checkpointing its best held-out state to
    ``out`` (rank 0 only writes, holding its lock); ``out`` and ``commands`` as for ``fit``."""
    if cfg.block_size > config.max_len:
        raise UsageError(f"block_size {cfg.block_size} exceeds the model's context "
                         f"max_len={config.max_len}")
    if data.tokenizer.vocab_size > config.vocab_size:
        raise UsageError(f"the tokenizer has {data.tokenizer.vocab_size} tokens but the model's "
                         f"vocab_size is {config.vocab_size}")
    return loop.run(LanguageModel(config, cfg, data), cfg, out, resume=resume,
                    overwrite=overwrite, device=device, show=show, progress=progress,
                    commands=commands)


def text_meta(files: list[str], out: str | Path) -> dict:
    """What a run directory ``out`` records of its text: paths relative to it, their sha256."""
    return {"text": [os.path.relpath(Path(f).resolve(), Path(out).resolve()) for f in files],
            "text_sha256": files_sha256(files)}


class LanguageModel:
    """The decoder-only LM's ``training.loop.Recipe``."""

    files = FILES
    keep_best = True  # the run directory holds the best held-out state
    ema_decay = None  # the trained weights are validated and saved

    def __init__(self, config: LMConfig, cfg: LMTrainConfig, data: LMData):
        self.config, self.cfg, self.data = config, cfg, data
        self.blocks = eval_blocks(data.valid, cfg.block_size, cfg.eval_blocks)
        self.best: tuple[float, int] | None = None  # (loss, step) of the best validation

    def new_model(self) -> DecoderOnlyLM:
        return DecoderOnlyLM(self.config)

    def resume(self, out: Path, device: torch.device):
        ckpt = load_lm_checkpoint(out, device)
        check_same("model", self.config.to_dict(), ckpt.model.config.to_dict(), out)
        check_settings(self.cfg, ckpt.meta.get("train", {}), out, MAY_CHANGE)
        if ckpt.meta.get("text_sha256") not in (None, files_sha256(self.data.files)):
            raise UsageError(f"cannot resume: the text ({', '.join(self.data.files)}) is not "
                             f"the text the run in {out} was trained on (sha256 differs)")
        return ckpt.model, ckpt.step, ckpt.meta.get("history", []), ckpt.trainer_state()

    def objective(self, model: DecoderOnlyLM) -> NextToken:
        return NextToken(model)

    def optimizer(self, model: DecoderOnlyLM):
        c = self.cfg
        return make_adamw(model, lr=c.lr, min_lr=c.min_lr, warmup=c.warmup, total=c.max_steps,
                          weight_decay=c.weight_decay, betas=(0.9, c.beta2))

    def batches(self, start: int, ctx: distributed.Context):
        c = self.cfg
        return loop.rank_batches(start, ctx, lambda number: random_batch(
            self.data.train, c.batch_size, c.block_size, c.seed, number))

    def validate(self, model: DecoderOnlyLM) -> LMMetrics:
        return evaluate_lm(model, self.blocks, batch_size=4 * self.cfg.batch_size)

    def stop_reason(self, metrics: LMMetrics, bad: int) -> str | None:
        return loop.patience_spent(self.cfg.patience, bad)

    def meta(self, out: Path) -> dict:
        return {**text_meta(self.data.files, out), "tokenizer": self.data.tokenizer.kind}

    def save(self, out: Path, model: DecoderOnlyLM, step: int, meta: dict,
             trainer_state: dict) -> None:
        save_lm_checkpoint(out, model, self.data.tokenizer, step=step, meta=meta,
                           trainer_state=trainer_state)

    def report(self, metrics: LMMetrics, step: int, out: Path) -> None:
        report_best(metrics, step, out, "checkpoint")


def report_best(metrics: LMMetrics, step: int, out: str | Path, label: str) -> None:
    """Print a run's last validation and the best state its directory ``out`` keeps."""
    saved = read_meta(Path(out))
    best = min(saved["history"], key=lambda h: h["loss"])
    print(f"validation loss {metrics.loss:.4f} (perplexity {metrics.shown_perplexity}) "
          f"after {step} steps")
    print(f"{label}: {out} (step {saved['step']}, the lowest validation loss "
          f"{best['loss']:.4f})")

