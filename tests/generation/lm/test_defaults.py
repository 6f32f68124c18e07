"""generation.lm.defaults: a directory's settings and the LM's mode, through the one merge
(generation.settings.settle) with a user's settings."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from decoderkit.base.errors import UsageError
from decoderkit.generation.lm.defaults import BUILTIN, MODE, NO_DEFAULTS, GenerationDefaults
from decoderkit.generation.settings import FLAGS, Source
from decoderkit.generation.settings import settle as merge

NONE = dict.fromkeys(BUILTIN)  # a user who asks for nothing


def settle(asked, defaults):
    """The merge as ``lm sample`` makes it: its flags over the directory's settings."""
    return merge([Source(FLAGS, asked), defaults.as_source()], BUILTIN, MODE)


LLAMA = GenerationDefaults("generation_config.json", (128001, 128008, 128009), greedy=False,
                           temperature=0.6, top_p=0.9)


def test_the_users_setting_then_the_directorys_then_ours_each_noted():
    got = settle(NONE, LLAMA)
    assert got.values == {"max_new_tokens": 200, "greedy": False, "temperature": 0.6,
                          "top_k": 0, "top_p": 0.9}
    assert got.notes == ("greedy off (do_sample true) (from generation_config.json)",
                         "temperature 0.6 (from generation_config.json)",
                         "top_p 0.9 (from generation_config.json)")
    got = settle(NONE | {"temperature": 1.2, "max_new_tokens": 5}, LLAMA)
    assert got.values["temperature"] == 1.2 and got.values["top_p"] == 0.9
    assert got.values["max_new_tokens"] == 5
    assert not any("temperature" in n for n in got.notes)
    assert settle(NONE, NO_DEFAULTS) == settle(NONE | {"temperature": None}, NO_DEFAULTS)
    assert settle(NONE, NO_DEFAULTS).values == BUILTIN and not settle(NONE, NO_DEFAULTS).notes


def test_greedy_and_sampling_exclude_each_other_whoever_asks():
    greedy_dir = GenerationDefaults("g.json", greedy=True, temperature=0.7, top_k=20)
    got = settle(NONE, greedy_dir)  # the directory's greedy: its sampling settings unused
    assert got.values["greedy"] and got.values["temperature"] == 1.0
    assert got.notes == ("greedy on (do_sample false) (from g.json)",)
    got = settle(NONE | {"top_p": 0.5}, greedy_dir)  # the user samples: the directory yields
    assert not got.values["greedy"] and got.values["top_k"] == 20
    got = settle(NONE | {"greedy": True}, LLAMA)  # the user's greedy: no sampling defaults
    assert got.values["greedy"] and got.values["temperature"] == 1.0 and not got.notes
    with pytest.raises(TypeError, match="the flags: settings not known: \\['beam'\\]"):
        settle({"beam": 4}, LLAMA)


def test_end_ids_are_the_directorys_and_the_tokenizers():
    assert LLAMA.end_ids(SimpleNamespace(end_ids={128001})) == {128001, 128008, 128009}
    assert LLAMA.end_ids(SimpleNamespace(end_ids={7, 9})) == {7, 9, 128001, 128008, 128009}
    assert NO_DEFAULTS.end_ids() == frozenset()


@pytest.mark.parametrize("fields, needle", [
    (dict(eos_ids=(-1,)), "eos_token_id"), (dict(temperature=0.0), "temperature"),
    (dict(top_p=1.5), "top_p"), (dict(max_new_tokens=0), "max_new_tokens"),
    (dict(greedy="yes"), "greedy must be a bool"),
])
def test_values_out_of_range_are_refused_naming_them(fields, needle):
    with pytest.raises(UsageError, match=needle):
        GenerationDefaults("g.json", **fields)
