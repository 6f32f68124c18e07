"""The training run: the loop, validation, checkpoints, early stop and exact resume, on data
from ``training.prepare``. ``decoderkit train`` is a thin wrapper over this.

Resume is exact: the data order is a function of (seed, step), and the checkpoint carries
the optimiser, scheduler and RNG state, so an interrupted-then-resumed run ends with the same
weights as an uninterrupted one (same seed, device and thread count). Under torchrun only
rank 0's RNG state is saved, so a resumed multi-process run is equivalent, not bit-identical.
The writing process holds the output directory's lock (``training.rundir``) for the whole run.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm import tqdm

from decoderkit.base.checks import FRACTION, POSITIVE, SEED, Range, check_fields, count
from decoderkit.base.errors import UsageError
from decoderkit.nn.model import EncoderDecoder, ModelConfig
from decoderkit.training import distributed
from decoderkit.training.checkpoint import load_checkpoint, save_checkpoint
from decoderkit.training.data import Pair, bucket_batches, make_batch, shard
from decoderkit.training.evaluation import Metrics, evaluate
from decoderkit.training.objective import (
    LabelSmoothingLoss,
    TeacherForced,
    make_optimizer,
    train_step,
)
from decoderkit.training.prepare import (  # noqa: F401 (DataConfig, prepare_data: public here)
    DataConfig,
    Prepared,
    check_corpus,
    data_meta,
    prepare_data,
    recorded_data,
)
from decoderkit.training.rundir import claimed, run_dir


@dataclass(frozen=True)
class TrainConfig:
    """How to train; see ``decoderkit train --help`` for the meaning of each flag."""

    batch_size: int = 64  # sentences per micro-batch (per process)
    accum: int = 1  # micro-batches per optimiser step
    max_steps: int = 2000  # optimiser steps in all (a resumed run counts the earlier ones)
    time_limit: float | None = None  # seconds of training in this invocation, then stop
    warmup: int = 400  # noam warm-up steps w
    lr_factor: float = 1.0  # noam factor
    smoothing: float = 0.1  # label smoothing eps (uniform convention)
    clip: float | None = 1.0  # max gradient norm; None: no clipping
    valid_every: int = 200  # steps between validations (each also saves a checkpoint)
    patience: int = 0  # stop after this many validations without a lower loss; 0: never
    target_exact: float | None = None  # stop once held-out exact match reaches this
    seed: int = 0  # model initialisation, dropout and batch order

    def __post_init__(self):
        check_fields(self, TRAIN_RANGES, optional=("time_limit", "clip", "target_exact"))


TRAIN_RANGES = {  # what each TrainConfig field accepts (the train command's flags use these)
    "batch_size": count(), "accum": count(), "max_steps": count(), "time_limit": POSITIVE,
    "warmup": count(), "lr_factor": POSITIVE, "smoothing": FRACTION, "clip": POSITIVE,
    "valid_every": count(), "patience": count(0), "target_exact": Range(False, 0.0, 1.0),
    "seed": SEED}


@dataclass
class FitResult:
    """What a run ends with (on every process)."""

    model: EncoderDecoder  # the trained model (this process's replica)
    metrics: Metrics  # the last held-out validation
    step: int  # optimiser steps done in all


def fit(config: ModelConfig, cfg: TrainConfig, data: Prepared, out: str | Path, *,
        resume: bool = False, overwrite: bool = False, device: str = "auto", show: int = 5,
        progress: bool = True, allow_changed_data: bool = False) -> FitResult:
    """Train, validating and checkpointing to ``out`` (rank 0 only writes, holding its lock).

    ``out`` must be new, empty or a checkpoint (``--resume`` it, or ``overwrite`` it);
    resuming on a corpus other than the checkpoint's is refused unless ``allow_changed_data``.
    """
    shown, out = out, run_dir(out)  # resolved once: a symlink --out keeps its target
    ctx = distributed.setup(device)
    try:
        with claimed(out, resume=resume, overwrite=overwrite) if ctx.is_main else nullcontext():
            return _fit(config, cfg, data, out, ctx, resume, allow_changed_data, show, progress,
                        shown)
    finally:
        distributed.teardown(ctx)


@dataclass
class _State:
    """The run's moving parts, restored on resume."""

    model: EncoderDecoder
    step: int  # optimiser steps done
    history: list  # one dict per validation
    best: float = float("inf")  # lowest held-out loss so far
    bad: int = 0  # validations since it last fell
    origin: dict = dataclasses.field(default_factory=dict)  # a converted model's record, kept


def _fit(config: ModelConfig, cfg: TrainConfig, data: Prepared, out: Path,
         ctx: distributed.Context, resume: bool, allow_changed_data: bool, show: int,
         progress: bool, shown: str | Path) -> FitResult:
    run, saved = _start(config, data, out, ctx, resume, allow_changed_data, cfg.seed)
    criterion = LabelSmoothingLoss(cfg.smoothing, ignore_index=config.pad_id, reduction="sum")
    module = distributed.wrap(TeacherForced(run.model, criterion), ctx)
    optimizer, scheduler = make_optimizer(run.model, config.d_model, cfg.warmup, cfg.lr_factor)
    _restore(saved, run, optimizer, scheduler, ctx, cfg.seed)
    stream = _micro_batches(data.train, cfg, ctx, run.step * cfg.accum, config)
    bar = tqdm(total=cfg.max_steps, initial=run.step, disable=not (progress and ctx.is_main),
               unit="step", dynamic_ncols=True,
               mininterval=0.1 if sys.stderr.isatty() else 10.0)  # a log file: few updates
    started, tokens = time.monotonic(), 0
    metrics, hyps = None, []
    while run.step < cfg.max_steps:
        batches = [next(stream).to(ctx.device) for _ in range(cfg.accum)]
        total = int(distributed.all_sum(sum(b.n_tokens for b in batches), ctx))
        lr = scheduler.get_last_lr()[0]
        loss = train_step(module, batches, optimizer, scheduler, clip=cfg.clip,
                          total_tokens=total, scale=ctx.world)
        run.step, tokens = run.step + 1, tokens + total
        elapsed = time.monotonic() - started
        bar.update(1)
        bar.set_postfix(loss=f"{loss:.3f}", tok_s=f"{tokens / elapsed:.0f}", lr=f"{lr:.2e}")
        out_of_time = distributed.any_true(
            cfg.time_limit is not None and elapsed >= cfg.time_limit, ctx)
        if not (run.step % cfg.valid_every == 0 or run.step == cfg.max_steps or out_of_time):
            continue
        metrics, hyps = _validate(run, data, cfg.batch_size)
        reason = "time limit" if out_of_time else _stop_reason(cfg, metrics, run.bad)
        if ctx.is_main:
            bar.write(f"step {run.step} | {metrics.line()}")
            _save(out, run, data, cfg, reason, optimizer, scheduler, ctx)
        if reason:
            if ctx.is_main:
                bar.write(f"stopping early: {reason}")
            break
    bar.close()
    if metrics is None:
        raise UsageError(f"nothing to do: the run in {out} is already at step {run.step} "
                         f"(max_steps={cfg.max_steps})")
    if ctx.is_main and show:
        _report(data, hyps, metrics, run.step, shown, show)
    return FitResult(run.model, metrics, run.step)


def _start(config: ModelConfig, data: Prepared, out: Path, ctx: distributed.Context,
           resume: bool, allow_changed_data: bool, seed: int) -> tuple[_State, dict | None]:
    """A fresh model, or the checkpoint's (checked to be the same model and data) and its
    saved trainer state."""
    if not resume:
        torch.manual_seed(seed)
        return _State(EncoderDecoder(config).to(ctx.device), 0, []), None
    ckpt = load_checkpoint(out, ctx.device)
    _check_same("model", dataclasses.asdict(config), ckpt.config.to_dict(), out)
    if not first_data(ckpt.meta):
        _check_same("data", data_meta(data.config, out)["data"],
                    data_meta(recorded_data(ckpt.meta, out), out)["data"], out)
        check_corpus(data.config, ckpt.meta, out, allow_changed_data)
    origin = {k: ckpt.meta[k] for k in ORIGIN_KEYS if k in ckpt.meta}
    return (_State(ckpt.model.train(), ckpt.step, ckpt.meta.get("history", []), origin=origin),
            ckpt.trainer_state())


ORIGIN_KEYS = ("origin", "converted_from")  # meta of a converted checkpoint, kept by its runs


def first_data(meta: dict) -> bool:
    """True for a checkpoint that was never trained here (``decoderkit convert`` wrote it): it
    records no data, so ``--resume`` fine-tunes it on the data given, with its own model config
    and tokenizers, a fresh optimiser and schedule."""
    return meta.get("data") is None


def _restore(saved: dict | None, run: _State, optimizer, scheduler,
             ctx: distributed.Context, seed: int) -> None:
    """Continue from a checkpoint's trainer state (optimiser, schedule, RNG, early-stop count),
    or seed this process's own dropout stream for a fresh run."""
    if saved is None:
        torch.manual_seed(seed + ctx.rank)
        return
    optimizer.load_state_dict(saved["optimizer"])
    scheduler.load_state_dict(saved["scheduler"])
    torch.set_rng_state(saved["rng"])
    if ctx.device.type == "cuda" and "cuda_rng" in saved:
        torch.cuda.set_rng_state(saved["cuda_rng"], ctx.device)
    run.best, run.bad = saved["best_loss"], saved["bad_validations"]


def _validate(run: _State, data: Prepared, batch_size: int) -> tuple[Metrics, list[str]]:
    """Score the held-out pairs, record them in the history and the early-stop count."""
    metrics, hyps = evaluate(run.model, data.valid, [t for _, t in data.valid_texts],
                             data.tgt_tokenizer, batch_size=2 * batch_size)
    run.history.append({"step": run.step, **metrics.as_dict()})
    run.best, run.bad = (metrics.loss, 0) if metrics.loss < run.best else (run.best, run.bad + 1)
    return metrics, hyps


def _stop_reason(cfg: TrainConfig, metrics: Metrics, bad: int) -> str | None:
    """Why to stop early after this validation (None: go on)."""
    if cfg.patience and bad >= cfg.patience:
        return "no improvement"
    if cfg.target_exact is not None and metrics.exact_match >= cfg.target_exact:
        return "target exact match"
    return None


def _save(out: Path, run: _State, data: Prepared, cfg: TrainConfig, reason: str | None,
          optimizer, scheduler, ctx: distributed.Context) -> None:
    """Checkpoint the run: weights, tokenizers, metadata and the state to resume from."""
    trainer_state = {"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
                     "rng": torch.get_rng_state(), "best_loss": run.best,
                     "bad_validations": run.bad}
    if ctx.device.type == "cuda":
        trainer_state["cuda_rng"] = torch.cuda.get_rng_state(ctx.device)
    meta = {"history": run.history, **data_meta(data.config, out),
            "train": dataclasses.asdict(cfg), "stop_reason": reason, **run.origin}
    save_checkpoint(out, run.model, data.src_tokenizer, data.tgt_tokenizer, step=run.step,
                    meta=meta, trainer_state=trainer_state)


def _micro_batches(train: list[Pair], cfg: TrainConfig, ctx: distributed.Context, start: int,
                   config: ModelConfig):
    """Endless micro-batches from position ``start``; epoch e's order is fixed by (seed, e)."""
    lengths = [max(len(s), len(t)) for s, t in train]

    def epoch(e: int) -> list[list[int]]:
        return shard(bucket_batches(lengths, cfg.batch_size, seed=cfg.seed * 100_003 + e),
                     ctx.rank, ctx.world)

    per_epoch = len(epoch(0))
    if per_epoch == 0:
        raise UsageError(f"{len(train)} training pairs are too few for batch_size "
                         f"{cfg.batch_size} on {ctx.world} process(es)")
    e, pos = divmod(start, per_epoch)
    while True:
        for idx in epoch(e)[pos:]:
            yield make_batch([train[i] for i in idx], config.pad_id, config.bos_id,
                             config.eos_id)
        e, pos = e + 1, 0


def _check_same(what: str, given: dict, saved: dict, out: Path) -> None:
    """--resume must continue the same model and data: name the first field that differs."""
    for key, value in given.items():
        if key in saved and saved[key] != value:
            raise UsageError(f"cannot resume: {what} field {key!r} is {value!r} here but "
                             f"{saved[key]!r} in the checkpoint {out}")


def _report(data: Prepared, hyps: list[str], metrics: Metrics, step: int, out: str | Path,
            show: int) -> None:
    print(f"\nHeld-out translations after {step} steps:")
    for (src, ref), hyp in list(zip(data.valid_texts, hyps, strict=True))[:show]:
        mark = "✓" if hyp == ref else f"✗ (expected {ref})"
        print(f"  {src!r:>32} -> {hyp} {mark}")
    print(f"Exact match on {len(hyps)} held-out pairs: {100 * metrics.exact_match:.2f}%")
    print(f"Checkpoint: {out}")
