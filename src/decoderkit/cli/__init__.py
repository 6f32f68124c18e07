"""The ``decoderkit`` command: one module per subcommand, each parse, call the library, print.

A ``UsageError`` (or an ``OSError``: a missing file, a full disk) ends as one line on stderr
and exit status 2; any other exception is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from decoderkit.base.errors import UsageError
from decoderkit.base.files import out_of_space
from decoderkit.cli.args import document_ranges

# command word -> its module (each: add(sub), run(args)), in --help's order. A module is
# imported only when its command runs (or for the full parser): a server then holds none of
# the grader's, evaluator's or trainer's libraries (nbformat, sacrebleu...: 28 MB resident).
COMMANDS = {"train": "seq2seq.train", "translate": "seq2seq.translate",
            "eval": "seq2seq.evaluate", "params": "params", "figures": "figures", "check": "check",
            "bench": "bench", "export": "seq2seq.export", "convert": "seq2seq.convert",
            "grade": "grade", "serve": "serve", "lm": "lm", "data": "seq2seq.data"}


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage mistake is one line (with a pointer to --help) and exit 2."""

    def error(self, message: str):
        """Print ``prog: error: message (see prog --help)`` and exit 2."""
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The ``decoderkit`` parser with every subcommand, or with ``command`` (a key of
    ``COMMANDS``) alone: only its module is imported."""
    parser = _Parser(prog="decoderkit",
                     description="The Transformer built up from its decoder block, exact to the "
                     "textbook formulas, in two families: encoder-decoder (train, translate, "
                     "eval, ...) and decoder-only language models (decoderkit lm ...).")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for word, module in COMMANDS.items():
        if command in (None, word):
            importlib.import_module(f"decoderkit.cli.{module}").add(sub)
    document_ranges(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status (0 ok, 1 failed check, 2 user error, 130 ^C,
    141 when the reader of our output went away, as ``| head`` does: quietly, as a Unix tool)."""
    words = sys.argv[1:] if argv is None else argv
    parser = build_parser(words[0] if words and words[0] in COMMANDS else None)
    try:
        args = parser.parse_args(words)
        args.words = list(words)  # the command line, kept with a run (cli.resume)
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
