"""The one training loop, for every kind of model: a ``Recipe`` says what is trained (model,
objective, optimiser, batches, validation, checkpoint format); the loop does the rest.

The rest: the output directory's checks and lock (``training.rundir``), DDP under torchrun
(``training.distributed``), gradient accumulation and clipping (``objective.train_step``),
the progress bar (loss, tokens/s, learning rate, ETA), validation every ``valid_every`` steps,
``time_limit``, early stop, checkpoints and exact resume, and (a recipe's ``ema_decay``) an
exponential moving average of the weights, which validation and checkpoints then hold.

Resume is exact: a recipe's batches are a function of (seed, micro-batch index), and the
checkpoint carries the optimiser, scheduler and RNG state, so an interrupted-then-resumed run
ends with the same weights as an uninterrupted one (same seed, device and thread count). Under
torchrun only rank 0's RNG state is saved, so a resumed multi-process run is equivalent, not
bit-identical. A recipe with ``keep_best`` writes a checkpoint only when the validation loss
falls (the best model is what the directory holds; a resume continues from it).
"""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch
from torch import nn
from torch.optim.swa_utils import AveragedModel
from tqdm import tqdm

from decoderkit.base.errors import UsageError
from decoderkit.training import distributed
from decoderkit.training.objective import check_diverged, train_step
from decoderkit.training.rundir import claimed, run_dir


class Recipe(Protocol):
    """What one kind of model brings to the loop. Batches have ``.to(device)``, ``.inputs``
    (the objective's forward arguments) and ``.n_tokens``; metrics have ``.loss``, ``.line()``
    and ``.as_dict()``."""

    files: tuple[str, ...]  # the checkpoint format's files (what --out may hold)
    keep_best: bool  # checkpoint only when the validation loss falls
    ema_decay: float | None  # validate and save an exponential moving average of the weights
    # (``ema_update``) after every optimiser step; None: the weights themselves

    def new_model(self) -> nn.Module:
        """A freshly initialised model (the global RNG is seeded just before)."""

    def resume(self, out: Path, device: torch.device) -> tuple[nn.Module, int, list, dict]:
        """(model, step, history, trainer state) of the checkpoint in ``out``, checked to be
        the same model and data as this run's."""

    def objective(self, model: nn.Module) -> nn.Module:
        """forward(*batch.inputs) -> the summed loss over the batch's predicted tokens."""

    def optimizer(self, model: nn.Module) -> tuple[torch.optim.Optimizer, Any]:
        """(optimiser, LR scheduler stepped once per optimiser step)."""

    def batches(self, start: int, ctx: distributed.Context) -> Iterator:
        """Endless micro-batches for this process from micro-batch index ``start`` on."""

    def validate(self, model: nn.Module) -> Any:
        """Held-out metrics of ``model``."""

    def stop_reason(self, metrics: Any, bad: int) -> str | None:
        """Why to stop after this validation (``bad``: validations since the loss last fell)."""

    def meta(self, out: Path) -> dict:
        """What the checkpoint records of the data (beside history, settings, stop reason)."""

    def save(self, out: Path, model: nn.Module, step: int, meta: dict,
             trainer_state: dict) -> None:
        """Write the checkpoint."""

    def report(self, metrics: Any, step: int, out: str | Path) -> None:
        """Print the end of the run (rank 0, when asked; ``out`` as the user named it)."""


@dataclass
class LoopResult:
    """What a run ends with (on every process)."""

    model: nn.Module  # the model validated and saved (this process's replica, last state)
    metrics: Any  # the last validation
    step: int  # optimiser steps done in all


@dataclass
class _State:
    """The run's moving parts, restored on resume."""

    model: nn.Module
    step: int  # optimiser steps done
    history: list  # one dict per validation
    best: float = float("inf")  # lowest held-out loss so far
    bad: int = 0  # validations since it last fell
    averaged: AveragedModel | None = None  # the moving average of model's weights, if kept
    commands: list[list[str]] | None = None  # the command lines that made the run, if known

    @property
    def held(self) -> nn.Module:
        """The model validated and saved: the average when one is kept, else the model."""
        return self.model if self.averaged is None else self.averaged.module


def _averaged(decay: float | None, model: nn.Module, saved: dict | None
              ) -> AveragedModel | None:
    """The moving average (torch's ``AveragedModel``) of ``model``'s weights with ``decay``
    (None: no average). A resumed run's checkpoint holds the average and its trainer state the
    trained weights (``EMA_KEY``): ``model`` gets those back and the average goes on."""
    ema = (saved or {}).get(EMA_KEY)
    averaged = None if decay is None else AveragedModel(
        model, multi_avg_fn=ema_update(decay))  # a copy of the checkpoint's
    if ema is not None:
        try:
            model.load_state_dict(ema["trained"])
        except (KeyError, TypeError, RuntimeError) as err:
            raise UsageError(f"cannot resume: the checkpoint's trainer.pt {EMA_KEY!r} does not "
                             f"fit this model ({type(err).__name__}: {err})") from None
        if averaged is not None:
            averaged.n_averaged.fill_(int(ema["n_averaged"]))
    return averaged


def ema_update(decay: float) -> Callable:
    """torch's ``AveragedModel`` update: w_avg <- d w_avg + (1 - d) w with d = min(decay,
    (1 + n) / (10 + n)) after n updates (the first copies w), TensorFlow's warm-up of the
    decay: early weights leave the average within a few hundred steps, so a short run's
    average is not held back by its first, untrained weights."""
    def update(averaged: list[torch.Tensor], current: list[torch.Tensor], n) -> None:
        d = min(decay, (1 + float(n)) / (10 + float(n)))
        for a, w in zip(averaged, current, strict=True):
            a.lerp_(w, 1 - d)
    return update


EMA_KEY = "ema"  # trainer state of a run keeping an average: the trained weights and the count


def run(recipe: Recipe, cfg, out: str | Path, *, resume: bool = False,
        overwrite: bool = False, device: str = "auto", show: bool = True,
        progress: bool = True, commands: list[list[str]] | None = None) -> LoopResult:
    """Train by ``recipe`` under ``cfg`` (a frozen config with ``max_steps``, ``accum``,
    ``time_limit``, ``clip``, ``valid_every`` and ``seed``), checkpointing to ``out`` (rank 0
    only writes, holding its lock). ``out`` must be new, empty or a checkpoint of the format
    (``resume`` it, or ``overwrite`` it). ``commands``: the command lines that made the run,
    kept in every checkpoint's meta (``cli.resume`` fills a resume's flags from them)."""
    shown, out = out, run_dir(out)  # resolved once: a symlink --out keeps its target
    ctx = distributed.setup(device)
    try:
        with (claimed(out, resume=resume, overwrite=overwrite, files=recipe.files)
              if ctx.is_main else nullcontext()):
            return _run(recipe, cfg, out, ctx, resume, show, progress, shown, commands)
    finally:
        distributed.teardown(ctx)


def _run(recipe: Recipe, cfg, out: Path, ctx: distributed.Context, resume: bool, show: bool,
         progress: bool, shown: str | Path, commands: list[list[str]] | None) -> LoopResult:
    if resume:
        model, step, history, saved = recipe.resume(out, ctx.device)
        saved = _checked_trainer_state(saved, out, step, history, ctx)
        state = _State(model.train(), step, history)
    else:
        torch.manual_seed(cfg.seed)
        state, saved = _State(recipe.new_model().to(ctx.device), 0, []), None
    module = distributed.wrap(recipe.objective(state.model), ctx)
    optimizer, scheduler = recipe.optimizer(state.model)
    _restore(saved, state, optimizer, scheduler, ctx, cfg.seed)
    state.averaged = _averaged(recipe.ema_decay, state.model, saved)
    state.commands = commands
    stream = recipe.batches(state.step * cfg.accum, ctx)
    bar = tqdm(total=cfg.max_steps, initial=state.step, disable=not (progress and ctx.is_main),
               unit="step", dynamic_ncols=True,
               mininterval=0.1 if sys.stderr.isatty() else 10.0)  # a log file: few updates
    started, tokens = time.monotonic(), 0
    metrics = None
    while state.step < cfg.max_steps:
        batches = [next(stream).to(ctx.device) for _ in range(cfg.accum)]
        total = int(distributed.all_sum(sum(b.n_tokens for b in batches), ctx))
        lr = scheduler.get_last_lr()[0]
        loss = train_step(module, batches, optimizer, scheduler, clip=cfg.clip,
                          total_tokens=total, scale=ctx.world)
        if state.averaged is not None:
            state.averaged.update_parameters(state.model)
        state.step, tokens = state.step + 1, tokens + total
        elapsed = time.monotonic() - started
        bar.update(1)
        bar.set_postfix(loss=f"{loss:.3f}", tok_s=f"{tokens / elapsed:.0f}", lr=f"{lr:.2e}",
                        refresh=False)  # shown at the bar's own pace (a log: every 10 s)
        out_of_time = distributed.any_true(
            cfg.time_limit is not None and elapsed >= cfg.time_limit, ctx)
        if not (state.step % cfg.valid_every == 0 or state.step == cfg.max_steps
                or out_of_time):
            continue
        metrics = recipe.validate(state.held)
        check_diverged(metrics.loss, state.step, shown)  # never saved over a good checkpoint
        state.history.append({"step": state.step, **metrics.as_dict()})
        state.best, state.bad = ((metrics.loss, 0) if metrics.loss < state.best
                                 else (state.best, state.bad + 1))
        reason = "time limit" if out_of_time else recipe.stop_reason(metrics, state.bad)
        if ctx.is_main:
            bar.write(f"step {state.step} | {metrics.line()}")
            if not (recipe.keep_best and state.bad):
                _save(recipe, out, state, cfg, reason, optimizer, scheduler, ctx)
        if reason:
            if ctx.is_main:
                bar.write(f"stopping early: {reason}")
            break
    bar.close()
    if metrics is None:
        raise UsageError(f"nothing to do: the run in {out} is already at step {state.step} "
                         f"(max_steps={cfg.max_steps})")
    if ctx.is_main and show:
        recipe.report(metrics, state.step, shown)
    return LoopResult(state.held, metrics, state.step)


TRAINER_KEYS = ("optimizer", "scheduler", "rng", "best_loss", "bad_validations")  # _save's


def _checked_trainer_state(saved: dict | None, out: Path, step: int, history: list,
                           ctx: distributed.Context) -> dict | None:
    """A resume continues the optimiser, schedule and RNG of the run: a checkpoint trained
    here without them (trainer.pt deleted, or lacking a key) is refused, since resetting them
    would silently be another run. One never trained here (step 0, no validations: a converted
    model) starts them fresh, said once."""
    if saved is None and step == 0 and not history:
        if ctx.is_main:
            print(f"note: {out} was never trained here (no trainer.pt): --resume starts a fresh "
                  "optimiser, learning-rate schedule and RNG from its weights", file=sys.stderr)
        return None
    missing = [k for k in TRAINER_KEYS if saved is None or k not in saved]
    if missing:
        raise UsageError(f"cannot resume {out}: " + (
            f"it holds no trainer.pt (the optimiser, schedule and RNG state of its {step} "
            "steps, which a resume continues); start a new run with --overwrite"
            if saved is None else f"its trainer.pt lacks {', '.join(missing)}"))
    return saved


def _restore(saved: dict | None, state: _State, optimizer, scheduler,
             ctx: distributed.Context, seed: int) -> None:
    """Continue from a checkpoint's trainer state (optimiser, schedule, RNG, early-stop count),
    or seed this process's own dropout stream for a fresh run."""
    if saved is None:
        torch.manual_seed(seed + ctx.rank)
        return
    try:
        optimizer.load_state_dict(saved["optimizer"])
        scheduler.load_state_dict(saved["scheduler"])
        torch.set_rng_state(saved["rng"])
    except (ValueError, KeyError, TypeError, RuntimeError) as err:
        raise UsageError(f"cannot resume: the checkpoint's trainer.pt does not fit this model "
                         f"and optimiser ({type(err).__name__}: {err})") from None
    if ctx.device.type == "cuda" and "cuda_rng" in saved:
        torch.cuda.set_rng_state(saved["cuda_rng"], ctx.device)
    state.best, state.bad = saved["best_loss"], saved["bad_validations"]


def _save(recipe: Recipe, out: Path, state: _State, cfg, reason: str | None, optimizer,
          scheduler, ctx: distributed.Context) -> None:
    """Checkpoint the run: the recipe's files, metadata and the state to resume from."""
    trainer_state = {"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
                     "rng": torch.get_rng_state(), "best_loss": state.best,
                     "bad_validations": state.bad}
    if ctx.device.type == "cuda":
        trainer_state["cuda_rng"] = torch.cuda.get_rng_state(ctx.device)
    if state.averaged is not None:
        trainer_state[EMA_KEY] = {"trained": state.model.state_dict(),
                                  "n_averaged": int(state.averaged.n_averaged)}
    meta = {"history": state.history, **recipe.meta(out), "train": dataclasses.asdict(cfg),
            "stop_reason": reason,
            **({"commands": state.commands} if state.commands is not None else {})}
    recipe.save(out, state.held, state.step, meta, trainer_state)


def patience_spent(patience: int, bad: int) -> str | None:
    """The early-stop rule: "no improvement" once ``bad`` validations in a row have not
    lowered the loss and ``patience`` (0: never) allows no more; else None."""
    return "no improvement" if patience and bad >= patience else None


def rank_batches(start: int, ctx: distributed.Context,
                 batch: Callable[[int], Any]) -> Iterator:
    """Endless micro-batches ``batch(number)`` for this process from micro-batch ``start`` on:
    its micro-batch k is number k * world + rank, so the processes' streams are disjoint and
    a function of the number alone (an exact resume)."""
    k = start
    while True:
        yield batch(k * ctx.world + ctx.rank)
        k += 1

