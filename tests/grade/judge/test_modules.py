"""Module items (``judge.modules``): alternative builds (nanoGPT's GPTConfig, then the
course's ints) judge the first that constructs, and report the error of a build the file
could attempt; every build of a non-alternative item is judged."""

from grade.grade_helpers import fixture_source, grade_source

from decoderkit.grade import grader
from decoderkit.grade.judge.modules import builds

ITEMS = {item.name: item for item in grader.ITEMS}
COURSE = fixture_source("correct_gpt_course.py")  # the course's layout: built from ints


def _one(source: str, name: str):
    (outcome,) = grade_source(source, (ITEMS[name],)).outcomes
    return outcome


def test_the_build_that_constructs_is_judged():
    outcome = _one(COURSE, "CausalSelfAttention")  # no GPTConfig in the file: the ints build
    assert outcome.status == "pass" and not outcome.notes, outcome.detail


def test_without_the_config_class_the_ints_build_error_is_reported():
    source = ("import torch\n\nclass CausalSelfAttention(torch.nn.Module):\n"
              "    def __init__(self, d_model, n_heads):\n"
              "        raise ValueError('not yet')\n")
    outcome = _one(source, "CausalSelfAttention")
    assert outcome.status == "FAIL" and outcome.detail == "ValueError: not yet (line 5)"


def test_with_the_config_class_its_build_error_is_reported():
    source = ("import torch\nfrom dataclasses import dataclass\n\n@dataclass\n"
              "class GPTConfig:\n    n_embd: int = 16\n\n"
              "class CausalSelfAttention(torch.nn.Module):\n"
              "    def __init__(self, config):\n"
              "        raise ValueError('config read wrong')\n")
    outcome = _one(source, "CausalSelfAttention")
    assert outcome.status == "FAIL" and "GPTConfig" in outcome.detail  # its fields are refused


def test_every_build_of_an_item_is_judged():
    assert [b.seed for b in builds([(1,), (2,), (3,)], [])] == [7, 8, 9]
    source = fixture_source("correct_mha.py")
    assert _one(source, "DecoderStack").status == "pass"  # built with 2 layers, then 1
    one_layer_fails = source.replace(
        "        self.head = nn.Linear(d, V)\n",
        "        self.head = nn.Linear(d, V)\n        assert n_layers > 1, 'one layer'\n", 1)
    outcome = _one(one_layer_fails, "DecoderStack")
    assert outcome.status == "FAIL"
    assert outcome.detail.startswith("DecoderStack(20, 16, 2, 32, 1): AssertionError: one layer")
