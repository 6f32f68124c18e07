"""Flags shared by both families' commands: the model shape (``train``, ``params``,
``lm train``), the training loop's settings (``train``, ``lm train``; ``lm finetune`` the
run's), sampling (``translate``, ``lm sample``), --device and --threads.

One definition per setting: the same name (older spellings kept as aliases) and the same
bound in every command, the bound being the config field's own ``Range`` (so ``--help``
states what the config accepts).
"""

from __future__ import annotations

import argparse

from decoderkit.base.checks import (
    MAX_PARAMETERS,
    MAX_STEP_TOKENS,
    MODEL_SIZES,
    SEED,
    TEMPERATURE,
    VOCAB,
    Range,
    check_step_tokens,
)
from decoderkit.base.errors import UsageError
from decoderkit.cli.args import integer, number, ranged
from decoderkit.training.distributed import DEVICES

MAX_POSITIONS = MODEL_SIZES["max_len"].high  # --max-len / --block-size: the longest sequence
STEP = "--batch-size x --accum x --max-len"  # the positions one step holds (check_step)


def add_max_len(group, *, dest: str, default: int, low: int, text: str) -> None:
    """--max-len (canonical: the saved configs' ``max_len``), also spelled --block-size
    (lm train's name until 0.2): the model's context length, in positions, the training
    sequences' longest."""
    group.add_argument("--max-len", "--block-size", dest=dest, metavar="N",
                       type=integer(low, MAX_POSITIONS), default=default,
                       help=f"the model's context length in positions (--block-size is the "
                       f"same flag): {text}")


def check_step(args: argparse.Namespace, length: int) -> None:
    """The one bound on a training step's size, named by its flags (``check_step_tokens``)."""
    check_step_tokens(args.batch_size, args.accum, length, STEP)


def add_shape_flags(group, *, layers: int | None, d_model: int | None, heads: int | None,
                    d_ff: int | None, layers_help: str) -> None:
    """--layers, --d-model, --heads, --d-ff, each bounded by its ModelConfig/LMConfig field
    (defaults as given; None: the command fills them in, e.g. from a preset)."""
    group.add_argument("--layers", type=ranged(MODEL_SIZES["n_layers"]), default=layers,
                       help=f"{layers_help} (the sizes together: at most {MAX_PARAMETERS:,} "
                       "parameters)")
    group.add_argument("--d-model", type=ranged(MODEL_SIZES["d_model"]), default=d_model,
                       help="model width d (a multiple of --heads; even for sinusoidal "
                       "positions)")
    group.add_argument("--heads", type=ranged(MODEL_SIZES["n_heads"]), default=heads,
                       help="attention heads h (divide --d-model)")
    group.add_argument("--d-ff", type=ranged(MODEL_SIZES["d_ff"]), default=d_ff,
                       help="feed-forward width f" + ("" if d_ff else " (default 4 d)"))


def add_norm_first(group) -> None:
    """--norm-first: pre-norm instead of the paper's post-norm."""
    group.add_argument("--norm-first", action="store_true",
                       help="pre-norm x + F(LN(x)) instead of post-norm LN(x + F(x)); "
                       "pre-norm stacks end in a final norm")


def add_tie_generator(group) -> None:
    """--tie-generator: the output layer shares the target embedding (ModelConfig field)."""
    group.add_argument("--tie-generator", action="store_true",
                       help="generator weight = target embedding weight")


def add_loop_flags(group, defaults, ranges: dict[str, Range], *, batch_help: str) -> None:
    """The settings both families' training configs share, with the config's ``defaults``
    (a TrainConfig or LMTrainConfig) and each field's ``ranges``; --eval-every is an alias of
    --valid-every (lm train's name until 0.2)."""
    d, r = defaults, ranges
    for flags, name, text in (
            (("--batch-size",), "batch_size", f"{batch_help} ({STEP} at most "
             f"{MAX_STEP_TOKENS:,})"),
            (("--accum",), "accum", "micro-batches per step"),
            (("--max-steps",), "max_steps", "optimiser steps"),
            (("--warmup",), "warmup", f"warm-up steps (default {d.warmup}; at most "
             "--max-steps)"),
            (("--valid-every", "--eval-every"), "valid_every", "steps per validation"),
            (("--patience",), "patience", "stop early after this many validations without a "
             "lower loss (0: never)"),
            (("--seed",), "seed", "seed of initialisation, dropout and batches")):
        group.add_argument(*flags, dest=name, type=ranged(r[name]),
                           default=None if name == "warmup" else getattr(d, name), help=text)
    add_run_flags(group, d, r)


def warmup(args: argparse.Namespace, defaults) -> int:
    """--warmup as given, refused when longer than --max-steps (the learning rate would never
    reach its peak: a run not as asked), else the config's default (``defaults``)."""
    if args.warmup is None:
        return defaults.warmup
    if args.warmup > args.max_steps:
        raise UsageError(f"--warmup {args.warmup} is longer than --max-steps "
                         f"{args.max_steps}: the learning rate would never reach its peak; "
                         f"give --warmup at most {args.max_steps}")
    return args.warmup


def add_run_flags(group, defaults, ranges: dict[str, Range]) -> None:
    """--time-limit, --clip (the config's ``defaults`` and ``ranges``), --device, --threads,
    --quiet: how any training run (train, lm train, lm finetune) runs."""
    group.add_argument("--time-limit", type=ranged(ranges["time_limit"]),
                       help="stop after this many seconds of training (default: no limit)")
    group.add_argument("--clip", type=number(0), default=defaults.clip,
                       help="max gradient norm (0: none)")
    add_device(group)
    add_threads(group)
    group.add_argument("--quiet", action="store_true", help="no progress bar")


def add_sampling_flags(group, model_defaults: bool = False) -> None:
    """--temperature, --top-k, --top-p, --seed: how ``translate --sample`` and ``lm sample``
    draw each token. ``model_defaults``: a flag not given is None (the checkpoint's own
    default applies, else the one shown: ``generation.lm.defaults.settle``)."""
    own = " (default: the checkpoint's generation_config.json, else %s)" if model_defaults \
        else " (default: %s)"
    for flag, kind, default, text in (
            ("--temperature", ranged(TEMPERATURE), 1.0, "sampling temperature"),
            ("--top-k", integer(0, VOCAB.high), 0, "sample from the k most likely (0: all)"),
            ("--top-p", number(0, 1, low_open=True), 1.0, "nucleus sampling mass (1: all)")):
        group.add_argument(flag, type=kind, default=None if model_defaults else default,
                           help=text + own % default)
    group.add_argument("--seed", type=ranged(SEED), help="sampling seed (reproducible output)")


def add_device(group) -> None:
    """--device: where to run (training.distributed.DEVICES)."""
    group.add_argument("--device", choices=DEVICES, default="auto",
                       help="where to run: auto = CUDA when present, else CPU")


def add_threads(group, *, high: int = 1024) -> None:
    """--threads: torch's CPU threads (apply with ``set_threads``)."""
    group.add_argument("--threads", type=integer(1, high),
                       help="CPU threads for torch (default: torch's choice; 1 is fastest on a "
                       "busy machine)")


def set_threads(args: argparse.Namespace) -> None:
    """Apply --threads when given."""
    if args.threads is not None:
        import torch

        torch.set_num_threads(args.threads)
