"""The ``decoderkit`` command: argparse subcommands, each a thin wrapper over library calls.

User mistakes (bad files, flags, configs) end as one clear line on stderr and exit status 2,
never a traceback.
"""

from __future__ import annotations

import argparse
import sys


class UserError(Exception):
    """A mistake of the user's (bad file, flag or config): reported as one line, exit 2."""


def _not_yet(args: argparse.Namespace) -> int:
    raise UserError(f"'{args.command}' is not available yet")


# --- train (owner: training) ----------------------------------------------------------
def add_train(sub) -> None:
    p = sub.add_parser("train", help="train a model on a built-in task or your TSV corpus")
    p.set_defaults(func=_not_yet)


# --- translate (owner: decoding) ------------------------------------------------------
def add_translate(sub) -> None:
    p = sub.add_parser("translate", help="translate text with a trained checkpoint")
    p.set_defaults(func=_not_yet)


# --- eval (owner: training) -----------------------------------------------------------
def add_eval(sub) -> None:
    p = sub.add_parser("eval", help="evaluate a checkpoint on held-out pairs")
    p.set_defaults(func=_not_yet)


# --- params, figures, check, bench (owner: tools) -------------------------------------
def add_params(sub) -> None:
    p = sub.add_parser("params", help="parameter-count table per component")
    p.set_defaults(func=_not_yet)


def add_figures(sub) -> None:
    p = sub.add_parser("figures", help="draw the seed figures and attention maps")
    p.set_defaults(func=_not_yet)


def add_check(sub) -> None:
    p = sub.add_parser("check", help="conformance report: every numeric claim of the seeds")
    p.set_defaults(func=_not_yet)


def add_bench(sub) -> None:
    p = sub.add_parser("bench", help="run a benchmark script from benchmarks/")
    p.set_defaults(func=_not_yet)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="decoderkit",
        description="The encoder-decoder Transformer, exact to the textbook formulas.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in (add_train, add_translate, add_eval, add_params, add_figures, add_check,
                add_bench):
        add(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status (0 ok, 1 failed check, 2 user error)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (UserError, ValueError, TypeError, FileNotFoundError) as err:
        print(f"decoderkit {args.command}: error: {err}", file=sys.stderr)
        return 2
