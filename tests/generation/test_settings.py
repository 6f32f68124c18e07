"""generation.settings.settle: the one merge (request > flags > checkpoint > built-in), each
value's source named, and the mode switch between two ways of choosing tokens."""

from __future__ import annotations

import pytest

from decoderkit.generation.settings import BUILT_IN, FLAGS, REQUEST, Mode, Source, settle

BUILTIN = {"beam": 1, "sample": False, "temperature": 1.0, "max_len": None}
MODE = Mode("sample", on=("temperature",), off=("beam",))
CKPT = Source("generation_config.json", {"beam": 4, "max_len": 20, "temperature": 0.6},
              user=False)


def test_each_setting_from_the_highest_source_that_says_it_named():
    got = settle([Source(REQUEST, {"max_len": 5}), Source(FLAGS, {"max_len": 9, "beam": 2}),
                  CKPT], BUILTIN, MODE)
    assert got.values == {"beam": 2, "sample": False, "temperature": 1.0, "max_len": 5}
    assert got.origins == {"beam": FLAGS, "sample": FLAGS, "temperature": BUILT_IN,
                           "max_len": REQUEST}
    assert got.notes == ()  # nothing taken from the checkpoint
    got = settle([Source(REQUEST, {"beam": None}), Source(FLAGS, {}), CKPT], BUILTIN, MODE)
    assert got.values == {"beam": 4, "sample": False, "temperature": 1.0, "max_len": 20}
    assert got.notes == ("beam 4 (from generation_config.json)",
                         "max_len 20 (from generation_config.json)")
    assert settle([], BUILTIN, MODE).values == BUILTIN


def test_a_users_setting_of_one_way_chooses_it_and_the_other_ways_settings_yield():
    got = settle([Source(REQUEST, {"temperature": 0.5}), CKPT], BUILTIN, MODE)
    assert got.values["sample"] and got.values["beam"] == 1  # the checkpoint's beam yields
    assert got.origins["sample"] == REQUEST and got.values["max_len"] == 20
    got = settle([Source(FLAGS, {"sample": True}), CKPT], BUILTIN, MODE)
    assert got.values["temperature"] == 0.6 and got.values["beam"] == 1
    assert got.notes == ("temperature 0.6 (from generation_config.json)",
                         "max_len 20 (from generation_config.json)")
    greedy = Source("g.json", {"sample": False, "temperature": 0.6}, user=False)
    got = settle([Source(FLAGS, {}), greedy], BUILTIN, MODE)  # a checkpoint's own switch: its
    assert got.values == BUILTIN and got.notes == ("sample off (from g.json)",)  # draws unused
    got = settle([Source(REQUEST, {"beam": 3}), Source(FLAGS, {"sample": True})], BUILTIN, MODE)
    assert not got.values["sample"] and got.origins["sample"] == REQUEST  # the higher chooses


def test_a_setting_nobody_defined_is_a_bug():
    with pytest.raises(TypeError, match=r"the request: settings not known: \['beams'\]"):
        settle([Source(REQUEST, {"beams": 4})], BUILTIN, MODE)
