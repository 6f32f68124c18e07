"""GPT-1's fine-tuning (Radford et al. 2018, §3.2 and §4.1) as a ``training.loop`` recipe: a
pretrained LM grown by the start/delimiter/extract tokens, a linear head at the extract token,
loss = task loss + lm_coef * LM loss; AdamW, linear warm-up then linear decay. ``decoderkit
lm finetune`` is a thin wrapper over ``finetune``.

The defaults are the paper's (OpenAI's finetune-transformer-lm agrees): lr 6.25e-5, warm-up
over 0.2% of the steps, batch 32, 3 epochs, clipping 1, weight decay 0.01 (on matrices),
classifier dropout 0.1, lm_coef 0.5. A run directory records its TSV files and their sha256:
resuming on changed data or another model is refused, naming what differs.

Legend: B batch, T positions, V vocabulary (grown), C classes.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.optim.lr_scheduler import LambdaLR

from decoderkit.base.checks import FRACTION, POSITIVE, RATE, SEED, WEIGHT, check_fields, count, size
from decoderkit.base.errors import UsageError
from decoderkit.nn.lm.classifier import (
    NEW_TOKENS,
    GPTClassifier,
    check_label_count,
    classifier_config,
    with_new_tokens,
)
from decoderkit.nn.lm.model import DecoderOnlyLM
from decoderkit.training import distributed, loop
from decoderkit.training.resume import check_same, check_settings
from decoderkit.training.checkpoint_dir import read_meta
from decoderkit.training.lm.classifier_checkpoint import (
    FILES,
    open_classifier_checkpoint,
    save_classifier_checkpoint,
)
from decoderkit.training.lm.fit import text_meta
from decoderkit.training.lm.labelled import (
    ClassifierMetrics,
    Examples,
    Labelled,
    encode,
    epoch_batch,
    evaluate_classifier,
    label_ids,
)
from decoderkit.training.lm.objective import decay_groups, warmup_linear
from decoderkit.text.lm.tokenizer import LMTokenizer


@dataclass(frozen=True)
class FinetuneConfig:
    """How to fine-tune; ``decoderkit lm finetune --help`` explains each flag."""

    lr: float = 6.25e-5  # peak learning rate (GPT-1: 6.25e-5)
    warmup: float = 0.002  # fraction of the steps of linear warm-up (GPT-1: 0.2%)
    batch_size: int = 32  # examples per micro-batch (per process)
    accum: int = 1  # micro-batches per optimiser step
    epochs: int = 3  # passes over the training examples (GPT-1: 3)
    max_steps: int | None = None  # optimiser steps; None: those of ``epochs``
    lm_coef: float = 0.5  # lambda: loss = task loss + lambda * LM loss (GPT-1: 0.5)
    clf_dropout: float = 0.1  # dropout before the classification head (GPT-1: 0.1)
    weight_decay: float = 0.01  # AdamW decay on matrices (dim >= 2) only (GPT-1: 0.01)
    clip: float | None = 1.0  # max gradient norm; None: no clipping (GPT-1: 1)
    valid_every: int | None = None  # steps between validations; None: once per epoch
    time_limit: float | None = None  # seconds of training in this invocation, then stop
    seed: int = 0  # new rows, head, dropout and shuffling

    def __post_init__(self):
        check_fields(self, FINETUNE_RANGES, optional=("max_steps", "clip", "valid_every",
                                                     "time_limit"))


FINETUNE_RANGES = {  # what each field accepts (lm finetune's flags use these)
    "lr": RATE, "warmup": FRACTION, "batch_size": size(), "accum": size(),
    "epochs": count(), "max_steps": count(), "lm_coef": WEIGHT,
    "clf_dropout": FRACTION, "weight_decay": WEIGHT, "clip": POSITIVE,
    "valid_every": count(), "time_limit": POSITIVE, "seed": SEED}


class TransferLoss(nn.Module):
    """The classifier and GPT-1's loss in one forward, so DistributedDataParallel sees both.

    forward(ids (B, T), at (B,), targets (B,), lm_mask (B, T - 1)) -> sum over the B examples
    of -log P(target | x) + lm_coef * (mean over the example's predicted tokens of
    -log p(token | prefix)); the LM predicts every real token after the start token.
    """

    def __init__(self, model: GPTClassifier, lm_coef: float):
        super().__init__()
        self.model, self.lm_coef = model, lm_coef

    def forward(self, ids: Tensor, at: Tensor, targets: Tensor, lm_mask: Tensor) -> Tensor:
        h = self.model.lm.features(ids)  # (B, T, d)
        task = F.cross_entropy(self.model.pooled(h, at), targets, reduction="sum")
        if not self.lm_coef:
            return task
        logits = self.model.lm.logits(h[:, :-1])  # (B, T - 1, V)
        per_token = F.cross_entropy(logits.transpose(1, 2), ids[:, 1:], reduction="none")
        lm = (per_token * lm_mask).sum(1) / lm_mask.sum(1).clamp_min(1)  # (B,)
        return task + self.lm_coef * lm.sum()


def schedule(cfg: FinetuneConfig, examples: int) -> FinetuneConfig:
    """``cfg`` with ``max_steps`` (``epochs`` of ``examples`` over all processes) and
    ``valid_every`` (one epoch) filled in where None."""
    per_step = cfg.batch_size * cfg.accum * distributed.world_size()
    epoch = max(1, -(-examples // per_step))
    return dataclasses.replace(cfg, max_steps=cfg.max_steps or cfg.epochs * epoch,
                               valid_every=cfg.valid_every or epoch)


def finetune(pretrained: DecoderOnlyLM, tokenizer: LMTokenizer, cfg: FinetuneConfig,
             train: Labelled, valid: Labelled, out: str | Path, *, resume: bool = False,
             overwrite: bool = False, device: str = "auto", show: bool = True,
             progress: bool = True, commands: list[list[str]] | None = None
             ) -> loop.LoopResult:
    """Fine-tune ``pretrained`` (left unchanged) on ``train``, validating on ``valid``;
    checkpoints to ``out`` (with ``commands``) as ``training.loop.run`` does. The classes are
    ``train``'s labels, sorted."""
    if tokenizer.vocab_size > pretrained.config.vocab_size:
        raise UsageError(f"the tokenizer has {tokenizer.vocab_size} tokens but the model's "
                         f"vocab_size is {pretrained.config.vocab_size}")
    labels = tuple(sorted(set(train.labels)))
    check_label_count(len(labels), train.file)
    if len(labels) < 2:
        raise UsageError(f"{train.file}: one label only ({labels[0]!r}); a classifier needs 2")
    if valid.pairs != train.pairs:
        raise UsageError(f"{valid.file} and {train.file} differ: one has text pairs")
    cfg = schedule(cfg, len(train.texts))
    return loop.run(Transfer(pretrained, tokenizer, cfg, train, valid, labels), cfg, out,
                    resume=resume, overwrite=overwrite, device=device, show=show,
                    progress=progress, commands=commands)


class Transfer:
    """GPT-1's fine-tuning as a ``training.loop.Recipe``."""

    files = FILES
    keep_best = False  # the run directory holds the last state (GPT-1 trains 3 epochs)
    ema_decay = None  # the trained weights are validated and saved

    def __init__(self, pretrained: DecoderOnlyLM, tokenizer: LMTokenizer,
                 cfg: FinetuneConfig, train: Labelled, valid: Labelled,
                 labels: tuple[str, ...]):
        self.pretrained, self.tokenizer, self.cfg = pretrained, tokenizer, cfg  # scheduled
        self.head = classifier_config(pretrained, labels, cfg.clf_dropout, train.pairs)
        context = pretrained.config.max_len
        self.train = encode(train, tokenizer, self.head, context, label_ids(train, labels))
        self.valid = encode(valid, tokenizer, self.head, context, label_ids(valid, labels))
        self.data = (train, valid)

    def new_model(self) -> GPTClassifier:
        lm = with_new_tokens(copy.deepcopy(self.pretrained).train(), len(NEW_TOKENS))
        return GPTClassifier(lm, self.head)

    def resume(self, out: Path, device: torch.device):
        ckpt = open_classifier_checkpoint(out, device)
        c = self.pretrained.config
        grown = dataclasses.replace(c, vocab_size=c.vocab_size + len(NEW_TOKENS))
        check_same("model", grown.to_dict(), ckpt.model.lm.config.to_dict(), out)
        if ckpt.model.config.pairs is None:  # a run of an earlier release: its data tells
            ckpt.model.config = dataclasses.replace(ckpt.model.config, pairs=self.head.pairs)
        check_same("classifier", self.head.to_dict(), ckpt.model.config.to_dict(), out)
        given = text_meta([d.file for d in self.data], out)
        if ckpt.meta.get("text_sha256") not in (None, given["text_sha256"]):
            raise UsageError(f"cannot resume: the data ({', '.join(given['text'])}) is not "
                             f"what the run in {out} was trained on (sha256 differs)")
        check_settings(self.cfg, ckpt.meta.get("train", {}), out)
        return ckpt.model, ckpt.step, ckpt.meta.get("history", []), ckpt.trainer_state()

    def objective(self, model: GPTClassifier) -> TransferLoss:
        return TransferLoss(model, self.cfg.lm_coef)

    def optimizer(self, model: GPTClassifier):
        c = self.cfg
        warmup = max(1, round(c.warmup * c.max_steps)) if c.warmup else 0
        optimizer = torch.optim.AdamW(decay_groups(model, c.weight_decay), lr=c.lr,
                                      betas=(0.9, 0.999), eps=1e-8)
        return optimizer, LambdaLR(optimizer,
                                   lambda done: warmup_linear(done, warmup, c.max_steps))

    def batches(self, start: int, ctx: distributed.Context):
        return loop.rank_batches(start, ctx, lambda number: epoch_batch(
            self.train, self.cfg.batch_size, self.cfg.seed, number, self.head.start_id))

    def validate(self, model: GPTClassifier) -> ClassifierMetrics:
        return evaluate_classifier(model, self.valid, batch_size=2 * self.cfg.batch_size)

    def stop_reason(self, metrics: ClassifierMetrics, bad: int) -> str | None:
        return None

    def meta(self, out: Path) -> dict:
        return {**text_meta([d.file for d in self.data], out), "tokenizer": self.tokenizer.kind,
                "examples": {"train": len(self.train.ids), "valid": len(self.valid.ids),
                             "cut_to_context": self.train.cut + self.valid.cut}}

    def save(self, out: Path, model: GPTClassifier, step: int, meta: dict,
             trainer_state: dict) -> None:
        save_classifier_checkpoint(out, model, self.tokenizer, step=step, meta=meta,
                                   trainer_state=trainer_state)

    def report(self, metrics: ClassifierMetrics, step: int, out: Path) -> None:
        saved = read_meta(Path(out))
        print(f"{metrics.line()} after {step} steps")
        print(f"checkpoint: {out} (step {saved['step']}, labels {', '.join(self.head.labels)})")


def examples_of(data: Labelled, tokenizer: LMTokenizer, model: GPTClassifier) -> Examples:
    """``data`` encoded for ``model`` (its labels, its context)."""
    return encode(data, tokenizer, model.config, model.lm.config.max_len,
                  label_ids(data, model.config.labels))
