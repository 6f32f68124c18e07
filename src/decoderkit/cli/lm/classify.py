"""``decoderkit lm classify``: the label a fine-tuned classifier gives each text."""

from __future__ import annotations

import argparse

from decoderkit.cli.args import pathname, text
from decoderkit.cli.shape import add_threads, set_threads


def add(lm) -> None:
    """The ``lm classify`` parser: the classifier and the texts."""
    p = lm.add_parser("classify", help="label texts with a fine-tuned classifier",
                      description="Print one line per text: the label the classifier gives it "
                      "and its probability, tab-separated. A pair of texts is given as one "
                      "argument with a TAB between them.")
    p.add_argument("--checkpoint", required=True, metavar="DIR", type=pathname,
                   help="a classifier (lm finetune's run directory, or a Hugging Face "
                   "GPT2ForSequenceClassification directory)")
    p.add_argument("texts", nargs="+", metavar="TEXT", type=text, help="the texts to label")
    add_threads(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Label each text; print label TAB probability."""
    from decoderkit.cli.lm.common import load_classifier
    from decoderkit.training.lm.labelled import Labelled, classify

    set_threads(args)
    model, tokenizer = load_classifier(args.checkpoint)
    data = Labelled([tuple(t.split("\t")) for t in args.texts], [], "TEXT")
    for label, p in classify(model, tokenizer, data):
        print(f"{label}\t{p:.4f}")
    return 0
