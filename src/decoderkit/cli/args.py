"""Typed, range-checked values for argparse's ``type=``: a bad value is refused at the boundary.

argparse reports a refusal as ``argument --flag: expected ..., got '...'``, one line naming the
flag, the expected and the actual value. Every numeric flag of every subcommand uses these.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable


def integer(low: int | None = None, high: int | None = None) -> Callable[[str], int]:
    """An int in [low, high] (either end open when None)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {_span('an integer', low, high)}, "
                                             f"got {text!r}") from None
        if (low is not None and value < low) or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"expected {_span('an integer', low, high)}, "
                                             f"got {text!r}")
        return value

    parse.__name__ = "integer"
    return parse


def number(low: float | None = None, high: float | None = None, *,
           low_open: bool = False, high_open: bool = False) -> Callable[[str], float]:
    """A finite float in [low, high]; ``low_open`` / ``high_open`` exclude that end."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        ok = math.isfinite(value) \
            and (low is None or value > low or (value == low and not low_open)) \
            and (high is None or value < high or (value == high and not high_open))
        if not ok:
            what = _span("a finite number", low, high, low_open, high_open)
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
        return value

    parse.__name__ = "number"
    return parse


def _span(kind: str, low, high, low_open: bool = False, high_open: bool = False) -> str:
    """'an integer >= 1', 'a finite number in (0, 1]', ... for the refusal message."""
    if low is not None and high is not None:
        return f"{kind} in {'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"
    if low is not None:
        return f"{kind} {'>' if low_open else '>='} {low}"
    if high is not None:
        return f"{kind} {'<' if high_open else '<='} {high}"
    return kind
