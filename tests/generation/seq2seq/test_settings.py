"""generation.seq2seq.settings: a checkpoint's own decoding settings under what a caller says,
through the one merge."""

from __future__ import annotations

import pytest

from decoderkit.generation.seq2seq.settings import settled_options
from decoderkit.generation.seq2seq.translate import DecodeOptions
from decoderkit.generation.settings import FLAGS, Source


@pytest.mark.parametrize("asked,expected", [
    ({}, DecodeOptions(beam=4, length_penalty=0.6, max_len=20, forced_eos=True)),
    ({"beam": 2, "length_penalty": 0.0, "max_len": 5},
     DecodeOptions(beam=2, length_penalty=0.0, max_len=5, forced_eos=True)),
    ({"sample": True, "seed": 3},  # sampling is one row: the directory's beam yields
     DecodeOptions(sample=True, seed=3, length_penalty=0.6, max_len=20, forced_eos=True)),
])
def test_settled_options_take_the_directorys_settings_where_the_caller_says_none(asked,
                                                                                  expected):
    meta = {"generation": {"beam": 4, "length_penalty": 0.6, "max_len": 20, "forced_eos": True}}
    assert settled_options([Source(FLAGS, asked)], meta)[0] == expected
    assert settled_options([Source(FLAGS, asked)], {})[0] == DecodeOptions(**{
        "length_penalty": 1.0, **asked})  # a checkpoint that says nothing: ours
