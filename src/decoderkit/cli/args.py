"""Typed, range-checked values for argparse's ``type=``: a bad value is refused at the boundary.

argparse reports a refusal as ``argument --flag: expected ..., got '...'``, one line naming the
flag, the expected and the actual value. Every numeric flag of every subcommand uses these;
``document_ranges`` then writes each flag's accepted range into its ``--help`` text, so the
help and the check cannot disagree.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from decoderkit.base.checks import Range


def integer(low: int | None = None, high: int | None = None) -> Callable[[str], int]:
    """An int in [low, high] (either end open when None)."""
    return ranged(Range(True, low, high))


def number(low: float | None = None, high: float | None = None, *,
           low_open: bool = False, high_open: bool = False) -> Callable[[str], float]:
    """A finite float in [low, high]; ``low_open`` / ``high_open`` exclude that end."""
    return ranged(Range(False, low, high, low_open, high_open))


def ranged(accepted: Range) -> Callable[[str], int | float]:
    """The argparse type of a ``Range`` (the one a config field is checked with)."""
    def parse(text: str) -> int | float:
        try:
            value = int(text) if accepted.integral else float(text)
        except ValueError:
            value = None
        if not accepted.accepts(value):
            raise argparse.ArgumentTypeError(f"expected {accepted.span}, got {text!r}")
        return value

    parse.__name__ = "integer" if accepted.integral else "number"
    parse.span = accepted.span
    return parse


def document_ranges(parser: argparse.ArgumentParser) -> None:
    """Append each range-checked flag's accepted values to its help, in every subcommand."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                document_ranges(sub)
        span = getattr(action.type, "span", None)
        if span and action.help and span not in action.help:
            action.help = f"{action.help} [{span}]"
