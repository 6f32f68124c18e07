"""``training.seq2seq.sword_cache``: a cache is used only if its digests match and its verses
are a reading; a damaged one is named on stderr and read again, never a traceback."""

import json

import pytest

from decoderkit.base.errors import UsageError
from decoderkit.training.seq2seq.sword_cache import cached, write_cache

SUMS = {"mods.d/x.conf": "ab" * 32}
VERSES = {"Gen": [["In the beginning", ""], ["And"]]}


def test_a_cache_is_used_only_with_the_same_digests(tmp_path):
    cache = tmp_path / "x.json"
    assert cached(cache, SUMS) is None
    write_cache(cache, SUMS, VERSES)
    assert cached(cache, SUMS) == VERSES
    assert cached(cache, {"mods.d/x.conf": "cd" * 32}) is None


@pytest.mark.parametrize("verses, why", [
    ({"Gen": "not a list"}, "its book 'Gen' is not a list of chapters"),
    ({"Gen": [["a"], "b"]}, "its Gen 2 is not a list of verse texts"),
    ({"Gen": [["a", 3]]}, "its Gen 1 is not a list of verse texts"),
    ([["a"]], "its 'verses' are not a map of books to chapters"),
    ({}, "its 'verses' are not a map of books to chapters")])
def test_verses_that_are_not_a_reading_are_named_and_read_again(tmp_path, capsys, verses, why):
    cache = tmp_path / "x.json"
    cache.write_text(json.dumps({"sha256": SUMS, "verses": verses}))
    assert cached(cache, SUMS) is None
    assert capsys.readouterr().err == f"note: the cache {cache} is damaged ({why}): the module " \
        "is read again\n"


def test_a_cache_that_is_not_json_or_not_a_file_is_named(tmp_path, capsys):
    cache = tmp_path / "x.json"
    cache.write_bytes(b"\xff{")
    assert cached(cache, SUMS) is None
    assert "x.json is damaged (not valid JSON (not UTF-8" in capsys.readouterr().err
    cache.write_text("[1]")
    assert cached(cache, SUMS) is None
    assert "damaged (no 'sha256' of the module's files)" in capsys.readouterr().err
    cache.unlink()
    cache.mkdir()
    with pytest.raises(UsageError, match="x.json is a directory, not a file data bible wrote"):
        cached(cache, SUMS)
