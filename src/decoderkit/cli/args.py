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
from decoderkit.base.errors import UsageError
from decoderkit.base.text import check_text


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


def text(value: str) -> str:
    """The argparse type of a text argument (a prompt, a sentence, a name, a token): Unicode.
    A command-line byte that is not UTF-8 is refused, naming it; a path may hold any bytes
    (``pathname``), as Linux names do."""
    try:
        return check_text(value, "the argument")
    except UsageError as err:
        try:
            shown = repr(value.encode("utf-8", "surrogateescape"))  # the bytes as given
        except UnicodeEncodeError:  # a surrogate no byte makes (main() called in-process)
            shown = ascii(value)
        raise argparse.ArgumentTypeError(f"expected UTF-8 text, got {shown} "
                                         f"({str(err).split(': ', 1)[1]})") from None


def pathname(value: str) -> str:
    """The argparse type of a file or directory argument: any bytes (Linux names may hold
    some that are not UTF-8), but not empty: '' names no file (it would be the working
    directory to some calls)."""
    if value == "":
        raise argparse.ArgumentTypeError("expected a path, got ''")
    return value


def document_ranges(parser: argparse.ArgumentParser) -> None:
    """Append each range-checked flag's accepted values to its help, in every subcommand."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                document_ranges(sub)
        span = getattr(action.type, "span", None)
        if span and action.help and span not in action.help:
            action.help = f"{action.help} [{span}]"
