"""The grader's generic rules: ``--exercise`` picks one seed's items (one line naming the
choices otherwise), and a file defining an item of an exclusive seed is judged on that seed
only, with the seed's note (Week 3's model files)."""

import pytest

from decoderkit.base.errors import UsageError
from decoderkit.grade import grader


def test_select_one_seed_or_all():
    assert {i.seed for i in grader.select("004")} == {"004"}
    assert grader.select(None) == grader.ITEMS
    with pytest.raises(UsageError, match="--exercise must be one of 000, 001, 002, 004, w3, "
                                         "got '003'"):
        grader.select("003")


def test_an_exclusive_seed_scopes_the_file():
    items = grader.select(None)
    judged, note = grader.scope(items, ["GPT", "LayerNorm"], None)
    assert {i.seed for i in judged} == {"w3"} and note.startswith("a Week 3 file")
    assert grader.scope(items, ["GPT", "LayerNorm"], "001") == (items, None)
    assert grader.scope(items, ["LayerNorm", "attention"], None) == (items, None)


def test_list_heads_each_seed_with_its_title():
    lines = grader.format_list("004").splitlines()
    assert lines[0] == "seed 004: " + grader.BY_SEED["004"].title
    assert lines[1].startswith("004  build_causal_mask(T)")
    heads = [line for line in grader.format_list().splitlines() if line.startswith("seed ")]
    assert [h.split(":")[0] for h in heads] == [f"seed {s}" for s in grader.SEEDS]


def test_grade_file_names_a_path_that_is_not_a_regular_file(tmp_path):
    """``grade_file`` (a caller without the CLI) applies the CLI's one rule for the path."""
    with pytest.raises(UsageError, match=f"^FILE {tmp_path} is a directory, not a regular file$"):
        grader.grade_file(tmp_path)
    with pytest.raises(UsageError, match="does not exist$"):
        grader.grade_file(tmp_path / "missing.py")
