"""``decoderkit lm classify``: the label a fine-tuned classifier gives each text."""

from __future__ import annotations

import argparse
import sys

from decoderkit.cli.args import pathname, text
from decoderkit.cli.shape import add_threads, set_threads


def add(lm) -> None:
    """The ``lm classify`` parser: the classifier and the texts."""
    p = lm.add_parser("classify", help="label texts with a fine-tuned classifier",
                      description="Print one line per text (each TEXT argument, or else each "
                      "line of stdin): the label the classifier gives it and its probability, "
                      "tab-separated. A pair of texts is given as one argument (line) with a "
                      "TAB between them, to a classifier fine-tuned on pairs.")
    p.add_argument("--checkpoint", required=True, metavar="DIR", type=pathname,
                   help="a classifier (lm finetune's run directory, or a Hugging Face "
                   "GPT2ForSequenceClassification directory)")
    p.add_argument("texts", nargs="*", metavar="TEXT", type=text,
                   help="the texts to label (none: stdin's lines)")
    add_threads(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Label each text; print label TAB probability."""
    from decoderkit.cli.lm.common import load_classifier
    from decoderkit.training.lm.labelled import classify, unlabelled

    set_threads(args)
    data = unlabelled(args.texts, "TEXT") if args.texts else unlabelled(_stdin(), "stdin")
    model, tokenizer = load_classifier(args.checkpoint)
    for label, p in classify(model, tokenizer, data):
        print(f"{label}\t{p:.4f}")
    return 0


def _stdin() -> list[str]:
    """stdin's lines, read as bytes (newlines only); a line that is not UTF-8 is refused by
    its number."""
    from decoderkit.base.errors import UsageError
    from decoderkit.base.text import decode_line, split_lines

    lines = []
    for n, raw in enumerate(split_lines(sys.stdin.buffer.read()), 1):
        try:
            lines.append(decode_line(raw, first=n == 1))
        except UsageError as err:
            raise UsageError(f"stdin: line {n}: {err}") from None
    return lines
