"""interop.fields: a foreign config's values read with their type and bounds, refused in one
line naming the file, the key, what it must be and what it is; never coerced."""

from __future__ import annotations

import pytest

from decoderkit.base.checks import count
from decoderkit.base.errors import UsageError
from decoderkit.interop.fields import check_vocabulary, read_field, shown


def deep(levels: int) -> list:
    value: list = []
    for _ in range(levels):
        value = [value]
    return value


@pytest.mark.parametrize("value, want, needle", [
    ("2", count(1, 8), "n must be an integer in [1, 8], got '2' (str)"),
    (2.0, count(1, 8), "n must be an integer in [1, 8], got 2.0 (float)"),
    (True, count(1, 8), "n must be an integer in [1, 8], got True (bool)"),
    (0, count(1, 8), "n must be an integer in [1, 8], got 0 (int)"),
    ("no", bool, "n must be a bool, got 'no' (str)"),
    (None, bool, "n must be a bool, got None (NoneType)"),
    (1, bool, "n must be a bool, got 1 (int)"),
    (["gelu"], ("gelu", "relu"), "n must be one of ('gelu', 'relu'), got ['gelu'] (list)"),
    (deep(100_000), count(1), "n must be an integer >= 1, got [[[...]]] (list)"),
])
def test_a_value_of_another_type_is_refused_not_coerced(value, want, needle):
    with pytest.raises(UsageError) as caught:
        read_field({"n": value}, "n", want, "cfg.json")
    assert str(caught.value) == f"cfg.json: {needle}"


def test_defaults_null_and_missing_keys():
    assert read_field({}, "n", bool, "f", default=True) is True
    assert read_field({"n": None}, "n", count(1), "f", nullable=True) is None
    with pytest.raises(UsageError, match=r"f: n must be an integer >= 1 or null, got 0"):
        read_field({"n": 0}, "n", count(1), "f", nullable=True)
    with pytest.raises(UsageError, match=r"^f: n is missing \(expected a bool\)$"):
        read_field({}, "n", bool, "f")


def test_shown_is_short_on_huge_or_deep_values():
    assert len(shown("x" * 10**6)) < 50 and shown(deep(100_000)) == "[[[...]]]"


def test_a_vocabulary_gives_each_id_to_one_token():
    check_vocabulary("v.json", {"a": 0, "b": 1, "c": 2})
    with pytest.raises(UsageError, match=r"^v.json: id 0 is given to 3 tokens \('a', 'b', 'c'\); "
                                         "each id must name one token$"):
        check_vocabulary("v.json", {"a": 0, "b": 0, "c": 0})
    with pytest.raises(UsageError, match="^v.json: no token has the id 1, yet 2 tokens need "
                                         r"the ids 0..1$"):
        check_vocabulary("v.json", {"a": 0, "b": 2})
