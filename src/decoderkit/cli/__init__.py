"""The ``decoderkit`` command: one module per subcommand, each parse, call the library, print.

A ``UsageError`` (or an ``OSError``: a missing file, a full disk) ends as one line on stderr
and exit status 2; any other exception is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import os
import sys

from decoderkit.base.errors import UsageError
from decoderkit.base.files import out_of_space
from decoderkit.cli import (
    bench,
    check,
    convert,
    data,
    evaluate,
    export,
    figures,
    grade,
    lm,
    params,
    serve,
    train,
    translate,
)
from decoderkit.cli.args import document_ranges

# each: add(sub), run(args)
COMMANDS = (train, translate, evaluate, params, figures, check, bench, export, convert, grade,
            serve, lm, data)


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage mistake is one line (with a pointer to --help) and exit 2."""

    def error(self, message: str):
        """Print ``prog: error: message (see prog --help)`` and exit 2."""
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """The ``decoderkit`` parser with every subcommand."""
    parser = _Parser(prog="decoderkit",
                     description="The Transformer built up from its decoder block, exact to the "
                     "textbook formulas, in two families: encoder-decoder (train, translate, "
                     "eval, ...) and decoder-only language models (decoderkit lm ...).")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        command.add(sub)
    document_ranges(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status (0 ok, 1 failed check, 2 user error, 130 ^C,
    141 when the reader of our output went away, as ``| head`` does: quietly, as a Unix tool)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as stop:  # --help (0) or a usage error (2), already printed
        return stop.code if isinstance(stop.code, int) else 2
    try:
        status = int(args.run(args) or 0)
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's exit
        return status
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
        return 141  # 128 + SIGPIPE
    except (UsageError, OSError) as err:
        if isinstance(err, OSError) and err.filename:  # a writer outside base.files
            err = out_of_space(err, os.path.dirname(os.path.abspath(err.filename))) or err
        print(f"{_name(args)}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{_name(args)}: interrupted", file=sys.stderr)
        return 130


def _name(args: argparse.Namespace) -> str:
    """The command's words as typed: 'decoderkit train', 'decoderkit lm sample'."""
    return " ".join(["decoderkit", args.command, *filter(None, [getattr(args, "lm_command",
                                                                        None)])])
