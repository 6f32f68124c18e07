"""The flags ``lm tune`` and ``lm finetune`` share: a pretrained model taught a task on examples
into a run directory (--checkpoint, --data, --valid, --out, --resume, --overwrite, the input
files' checks) and the training config's fields as flags, each bounded by the field's own
``Range`` (``add_config_flags``), so that one flag means one thing in both."""

from __future__ import annotations

import argparse

from decoderkit.base.checks import Range
from decoderkit.base.files import check_input_file
from decoderkit.cli.args import pathname, ranged
from decoderkit.cli.lm.common import CHECKPOINT_HELP
from decoderkit.cli.shape import add_run_flags

Row = tuple[tuple[str, ...], str, str]  # (the flag and its aliases, the config field, its help)

SHARED_ROWS: tuple[Row, ...] = (  # the fields both configs have, in the same sense
    (("--lr",), "lr", "peak learning rate (default %(default)s)"),
    (("--batch-size",), "batch_size", "examples per micro-batch (default %(default)s)"),
    (("--accum",), "accum", "micro-batches per step"),
    (("--weight-decay",), "weight_decay", "AdamW decay on matrices (default %(default)s)"))


def add_tuning_flags(p: argparse.ArgumentParser, *, base: str, data: str, examples: str,
                     valid: str, resume: str) -> None:
    """--checkpoint (``base``: what the model is), --data and --valid (files of ``data``, the
    metavar: ``examples`` and ``valid`` say what each holds), --out, --resume (``resume``:
    what it continues) and --overwrite."""
    p.add_argument("--checkpoint", required=True, metavar="DIR", type=pathname,
                   help=f"{base}: {CHECKPOINT_HELP}")
    p.add_argument("--data", required=True, metavar=data, type=pathname, help=examples)
    p.add_argument("--valid", metavar=data, type=pathname, help=valid)
    p.add_argument("--out", required=True, metavar="DIR", type=pathname, help="the run directory")
    p.add_argument("--resume", action="store_true",
                   help=f"continue the run in --out ({resume}; a flag left out is the run's own)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace the run in --out (a directory of other files is refused)")


def add_config_flags(group, defaults, ranges: dict[str, Range], rows: tuple[Row, ...]) -> None:
    """Each row's flag into ``group``: the config field's ``ranges`` entry its bound, its value
    in ``defaults`` (the config's defaults) its default; then the run's flags (``--time-limit``,
    ``--clip``, ``--device``, ``--threads``, ``--quiet``)."""
    for flags, name, words in rows:
        group.add_argument(*flags, dest=name, type=ranged(ranges[name]),
                           default=getattr(defaults, name), help=words)
    add_run_flags(group, defaults, ranges)


def check_inputs(args: argparse.Namespace) -> None:
    """--data and --valid (where given) are readable files, refused in one line if not."""
    for flag, file in (("--data", args.data), ("--valid", args.valid)):
        if file is not None:
            check_input_file(file, flag)
