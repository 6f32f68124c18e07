"""The training run: data from a built-in task or your corpus, the loop, validation,
checkpoints, early stop and exact resume. ``decoderkit train`` is a thin wrapper over this.

Resume is exact: the data order is a function of (seed, step), and the checkpoint carries
the optimiser, scheduler and RNG state, so an interrupted-then-resumed run ends with the same
weights as an uninterrupted one (same seed, device and thread count). Under torchrun only
rank 0's RNG state is saved, so a resumed multi-process run is equivalent, not bit-identical.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm import tqdm

from decoderkit.base.errors import UsageError
from decoderkit.nn.model import EncoderDecoder, ModelConfig
from decoderkit.training import distributed
from decoderkit.training.checkpoint import has_checkpoint, load_checkpoint, save_checkpoint
from decoderkit.training.data import (
    Pair,
    bucket_batches,
    make_batch,
    read_parallel,
    read_tsv,
    shard,
    split_held_out,
)
from decoderkit.training.evaluation import Metrics, evaluate
from decoderkit.training.objective import (
    LabelSmoothingLoss,
    TeacherForced,
    make_optimizer,
    train_step,
)
from decoderkit.training.tasks import get_task, task_pairs
from decoderkit.training.tokenizer import Tokenizer

KILL_HOOK = "DECODERKIT_TEST_KILL_AT_STEP"  # tests only: SIGKILL self after this step's save


@dataclass(frozen=True)
class DataConfig:
    """Where the pairs come from (exactly one of task / tsv / src+tgt) and how to split them."""

    task: str | None = None  # built-in task name ("copy", "reverse", "sort", "dates")
    tsv: str | None = None  # corpus file of 'source<TAB>target' lines
    src: str | None = None  # corpus as two line-aligned files: sources ...
    tgt: str | None = None  # ... and targets
    train_size: int = 20000  # built-in tasks: training pairs generated
    valid_size: int = 500  # held-out pairs
    vocab_size: int = 8000  # corpus: BPE vocabulary per side
    max_tokens: int = 126  # corpus: pairs with a longer side (in tokens) are dropped
    seed: int = 0  # generation and held-out split


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


@dataclass
class Prepared:
    """Tokenised data ready for training."""

    config: DataConfig
    src_tokenizer: Tokenizer
    tgt_tokenizer: Tokenizer
    train: list[Pair]
    valid: list[Pair]
    valid_texts: list[tuple[str, str]]  # held-out (source, reference) texts


def prepare_data(cfg: DataConfig, tokenizers: tuple[Tokenizer, Tokenizer] | None = None,
                 ) -> Prepared:
    """Generate or read the pairs, split off the held-out set, build (or reuse) tokenizers."""
    given = [name for name in ("task", "tsv", "src") if getattr(cfg, name)]
    if len(given) != 1 or bool(cfg.src) != bool(cfg.tgt):
        raise UsageError("give exactly one data source: a task, a TSV file, or src and tgt files")
    if cfg.task:
        train, valid = task_pairs(cfg.task, cfg.train_size, cfg.valid_size, cfg.seed)
        task = get_task(cfg.task)
        src_tok, tgt_tok = tokenizers or (Tokenizer.characters(task.src_alphabet),
                                          Tokenizer.characters(task.tgt_alphabet))
    else:
        pairs = read_tsv(cfg.tsv) if cfg.tsv else read_parallel(cfg.src, cfg.tgt)
        train, valid = split_held_out(pairs, min(cfg.valid_size, max(1, len(pairs) // 10)),
                                      cfg.seed)
        src_tok, tgt_tok = tokenizers or (  # BPE learned from the training split only
            Tokenizer.train_bpe([s for s, _ in train], cfg.vocab_size),
            Tokenizer.train_bpe([t for _, t in train], cfg.vocab_size))

    def fits(ids: Pair) -> bool:
        return 0 < len(ids[0]) <= cfg.max_tokens and len(ids[1]) <= cfg.max_tokens

    train_ids = [ids for ids in ((src_tok.encode(s), tgt_tok.encode(t)) for s, t in train)
                 if fits(ids)]
    held = [(text, ids) for text, ids in
            ((st, (src_tok.encode(st[0]), tgt_tok.encode(st[1]))) for st in valid) if fits(ids)]
    if not train_ids or not held:
        raise UsageError(f"no training or held-out pairs left after dropping pairs longer "
                         f"than max_tokens={cfg.max_tokens}")
    return Prepared(cfg, src_tok, tgt_tok, train_ids, [ids for _, ids in held],
                    [text for text, _ in held])


@dataclass
class FitResult:
    """What a run ends with (on every process)."""

    model: EncoderDecoder  # the trained model (this process's replica)
    metrics: Metrics  # the last held-out validation
    step: int  # optimiser steps done in all


def fit(config: ModelConfig, cfg: TrainConfig, data: Prepared, out: str | Path, *,
        resume: bool = False, overwrite: bool = False, device: str = "auto", show: int = 5,
        progress: bool = True) -> FitResult:
    """Train, validating and checkpointing to ``out`` (rank 0 only writes)."""
    ctx = distributed.setup(device)
    try:
        return _fit(config, cfg, data, Path(out), ctx, resume, overwrite, show, progress)
    finally:
        distributed.teardown(ctx)


def _fit(config: ModelConfig, cfg: TrainConfig, data: Prepared, out: Path,
         ctx: distributed.Context, resume: bool, overwrite: bool, show: int,
         progress: bool) -> FitResult:
    state, history = None, []
    if resume:
        ckpt = load_checkpoint(out, ctx.device)
        _check_same("model", dataclasses.asdict(config), ckpt.config.to_dict(), out)
        _check_same("data", dataclasses.asdict(data.config), ckpt.meta.get("data", {}), out)
        model, step, state = ckpt.model.train(), ckpt.step, ckpt.trainer_state()
        history = ckpt.meta.get("history", [])
    else:
        check_fresh(out, overwrite)
        torch.manual_seed(cfg.seed)
        model, step = EncoderDecoder(config).to(ctx.device), 0
    criterion = LabelSmoothingLoss(cfg.smoothing, ignore_index=config.pad_id, reduction="sum")
    module = distributed.wrap(TeacherForced(model, criterion), ctx)
    optimizer, scheduler = make_optimizer(model, config.d_model, cfg.warmup, cfg.lr_factor)
    best, bad = float("inf"), 0
    if state is not None:
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        torch.set_rng_state(state["rng"])
        if ctx.device.type == "cuda" and "cuda_rng" in state:
            torch.cuda.set_rng_state(state["cuda_rng"], ctx.device)
        best, bad = state["best_loss"], state["bad_validations"]
    else:
        torch.manual_seed(cfg.seed + ctx.rank)  # each process its own dropout stream

    stream = _micro_batches(data.train, cfg, ctx, step * cfg.accum, config)
    bar = tqdm(total=cfg.max_steps, initial=step, disable=not (progress and ctx.is_main),
               unit="step", dynamic_ncols=True,
               mininterval=0.1 if sys.stderr.isatty() else 10.0)  # a log file: few updates
    started, tokens = time.monotonic(), 0
    metrics, hyps = None, []
    while step < cfg.max_steps:
        batches = [next(stream).to(ctx.device) for _ in range(cfg.accum)]
        total = int(distributed.all_sum(sum(b.n_tokens for b in batches), ctx))
        lr = scheduler.get_last_lr()[0]
        loss = train_step(module, batches, optimizer, scheduler, clip=cfg.clip,
                          total_tokens=total, scale=ctx.world)
        step, tokens = step + 1, tokens + total
        elapsed = time.monotonic() - started
        bar.update(1)
        bar.set_postfix(loss=f"{loss:.3f}", tok_s=f"{tokens / elapsed:.0f}", lr=f"{lr:.2e}")
        out_of_time = distributed.any_true(
            cfg.time_limit is not None and elapsed >= cfg.time_limit, ctx)
        if not (step % cfg.valid_every == 0 or step == cfg.max_steps or out_of_time):
            continue
        metrics, hyps = evaluate(model, data.valid, [t for _, t in data.valid_texts],
                                 data.tgt_tokenizer, batch_size=2 * cfg.batch_size)
        history.append({"step": step, **metrics.as_dict()})
        best, bad = (metrics.loss, 0) if metrics.loss < best else (best, bad + 1)
        reason = ("time limit" if out_of_time else
                  "no improvement" if cfg.patience and bad >= cfg.patience else
                  "target exact match" if cfg.target_exact is not None
                  and metrics.exact_match >= cfg.target_exact else None)
        if ctx.is_main:
            bar.write(f"step {step} | {metrics.line()}")
            trainer_state = {"optimizer": optimizer.state_dict(),
                             "scheduler": scheduler.state_dict(), "rng": torch.get_rng_state(),
                             "best_loss": best, "bad_validations": bad}
            if ctx.device.type == "cuda":
                trainer_state["cuda_rng"] = torch.cuda.get_rng_state(ctx.device)
            meta = {"history": history, "data": dataclasses.asdict(data.config),
                    "train": dataclasses.asdict(cfg), "stop_reason": reason}
            save_checkpoint(out, model, data.src_tokenizer, data.tgt_tokenizer, step=step,
                            meta=meta, trainer_state=trainer_state)
            if os.environ.get(KILL_HOOK) == str(step):
                os.kill(os.getpid(), signal.SIGKILL)
        if reason:
            if ctx.is_main:
                bar.write(f"stopping early: {reason}")
            break
    bar.close()
    if metrics is None:
        raise UsageError(f"nothing to do: the run in {out} is already at step {step} "
                         f"(max_steps={cfg.max_steps})")
    if ctx.is_main and show:
        _report(data, hyps, metrics, step, out, show)
    return FitResult(model, metrics, step)


def check_fresh(out: str | Path, overwrite: bool) -> None:
    """A new run must not silently replace an existing checkpoint."""
    if has_checkpoint(out) and not overwrite:
        raise UsageError(f"{out} already holds a checkpoint; pass --resume to continue it "
                         f"or --overwrite to replace it")


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


def _report(data: Prepared, hyps: list[str], metrics: Metrics, step: int, out: Path,
            show: int) -> None:
    print(f"\nHeld-out translations after {step} steps:")
    for (src, ref), hyp in list(zip(data.valid_texts, hyps, strict=True))[:show]:
        mark = "✓" if hyp == ref else f"✗ (expected {ref})"
        print(f"  {src!r:>32} -> {hyp} {mark}")
    print(f"Exact match on {len(hyps)} held-out pairs: {100 * metrics.exact_match:.2f}%")
    print(f"Checkpoint: {out}")
