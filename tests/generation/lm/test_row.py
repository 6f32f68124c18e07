"""generation.lm.row: a row's settings are checked when made, each bad value named; a stop
sequence needs a decode to be matched against the text."""

from __future__ import annotations

import pytest

from decoderkit.base.errors import UsageError
from decoderkit.generation.lm.row import Row, Settings


@pytest.mark.parametrize("kwargs, message", [
    (dict(max_new_tokens=-1), "max_new_tokens must be"),
    (dict(max_new_tokens=2, temperature=0.0), "temperature must be"),
    (dict(max_new_tokens=2, seed=-1), "seed must be"),
    (dict(max_new_tokens=2, presence_penalty=float("nan")), "presence_penalty must be finite"),
    (dict(max_new_tokens=2, stop=("",)), r"stop\[0\] must be a non-empty string"),
])
def test_bad_settings_refused(kwargs, message):
    with pytest.raises(UsageError, match=message):
        Settings(**kwargs)


def test_stop_needs_a_decode():
    with pytest.raises(UsageError, match="need a decode"):
        Row([1], Settings(2, stop=("x",)))


def test_the_context_is_the_last_positions_of_prompt_and_tokens():
    """Every engine reads a row through ``context`` (nanoGPT's crop)."""
    row = Row([1, 2, 3], Settings(4))
    assert row.context(8) == [1, 2, 3] and row.context(2) == [2, 3]
    row.tokens += [4, 5]
    assert row.context(3) == [3, 4, 5] and row.context(8) == [1, 2, 3, 4, 5]
