"""generation.lm.stops.StopText: settled text only, stops never shown, pieces concatenate."""

from __future__ import annotations

import pytest

from decoderkit.base.errors import UsageError
from decoderkit.generation.lm.stops import UNFINISHED, StopText

PIECES = ["Hel", "lo", " wo", "rld", "!\n", "Bye"]


def decode(ids: list[int]) -> str:
    return "".join(PIECES[i] for i in ids)


def feed(stops):
    text, out = StopText(decode, stops), []
    for i in range(len(PIECES)):
        out.append(text.push(i))
        if text.stopped:
            break
    out.append(text.flush())
    return text, out


@pytest.mark.parametrize("stops, final, kept", [
    ((), "Hello world!\nBye", 6),
    (("o w",), "Hell", 1),  # spans tokens 1 and 2: "Hel" is the only whole token before it
    (("world", "lo"), "Hel", 1),  # the earliest wins
    (("\n",), "Hello world!", 4),
    (("Byte",), "Hello world!\nBye", 6),  # a prefix held, then released at the end
])
def test_final_text_and_kept_tokens(stops, final, kept):
    text, pieces = feed(stops)
    assert text.text == final == "".join(pieces) and text.kept == kept
    assert all(s not in "".join(pieces) for s in stops if s != "Byte")


def test_a_possible_stop_beginning_is_held_back():
    text = StopText(decode, ("lo wx",))
    assert text.push(0) == "He"  # "l" may begin "lo wx"
    assert text.push(1) == "l"  # "lo" may
    assert text.push(2) == "lo wo"  # "lo wo" cannot


def test_a_cut_character_waits_for_its_last_byte():
    parts = ["a", UNFINISHED, "é"]
    text = StopText(lambda ids: "".join(parts[i] for i in ids) if ids[-1] != 1
                    else "a" + UNFINISHED)
    assert text.push(0) == "a" and text.push(1) == ""
    parts[1] = ""  # the next byte completes the character
    assert text.push(2) == "é"


def test_empty_stop_refused():
    with pytest.raises(UsageError, match=r"stop\[1\] must be a non-empty string"):
        StopText(decode, ("x", ""))
