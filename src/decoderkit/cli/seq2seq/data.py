"""``decoderkit data bible``: a real parallel corpus (Spanish / English Bible) for ``train``."""

from __future__ import annotations

import argparse

from decoderkit.cli.args import pathname
from decoderkit.training.seq2seq.bible import DEV_BOOKS, TEST_BOOKS
from decoderkit.training.seq2seq.bible_modules import MODULES


def add(sub) -> None:
    """The subcommand and its one corpus, ``bible``."""
    p = sub.add_parser("data", help="get a parallel corpus to train a translator on",
                       description="bible: Reina-Valera 1909 (spa) and King James (eng) from "
                       "Debian's SWORD modules (sword-text-sparv, sword-text-kjv), cleaned, "
                       "aligned verse by verse (misaligned chapters dropped) and split by "
                       f"book: dev = {', '.join(DEV_BOOKS)}, test = {', '.join(TEST_BOOKS)}, "
                       "the rest train. Writes DIR/train.tsv, dev.tsv, test.tsv (source TAB "
                       "target) and manifest.json; the modules' reading is cached in "
                       "DIR/cache, and a second run reuses the files.")
    p.add_argument("name", choices=("bible",), help="the corpus")
    p.add_argument("--src", choices=tuple(MODULES), default="spa", help="source language")
    p.add_argument("--tgt", choices=tuple(MODULES), default="eng", help="target language")
    p.add_argument("--out", required=True, metavar="DIR", type=pathname, help="where to write it")
    p.add_argument("--sword-dir", metavar="DIR", type=pathname,
                   help="the SWORD library holding mods.d/ "
                   "(default /usr/share/sword, where Debian installs the modules)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Write (or reuse) the corpus and print its files and counts (and, on stderr, what to
    install for a second test reference)."""
    import sys

    from decoderkit.training.seq2seq.bible import bible
    from decoderkit.training.seq2seq.sword import SWORD_DIR

    manifest = bible(args.out, args.src, args.tgt, args.sword_dir or SWORD_DIR)
    for name, count in manifest["counts"].items():
        print(f"{args.out}/{name}: {count:,} verse pairs {args.src} -> {args.tgt}")
    dropped = manifest["dropped_chapters"]
    print(f"dropped: {manifest['dropped_empty']} pairs with an empty side, {len(dropped)} "
          "misaligned chapters (" + ", ".join(f"{d['book']} {d['chapter']}" for d in dropped)
          + f"); details in {args.out}/manifest.json")
    references = manifest.get("test_references") or {}
    if references.get("missing"):
        print(f"note: {references['missing']}", file=sys.stderr)
    elif references.get("second"):
        print(f"{args.out}/test.tsv: a second reference ({references['second']}) in its "
              f"third column for {references['verses']:,} verses")
    return 0
