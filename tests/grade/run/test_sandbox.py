"""Untrusted code in a real child process: each failure mode becomes a clear report line and a
failing verdict; the grader never crashes or hangs, and the learner's code never runs here."""

import sys

import pytest
from grade.grade_helpers import FIXTURES

from decoderkit.grade import grader


def _grade(name: str, **limits) -> grader.FileReport:
    # 3 s per call (an alarm on the wall clock): enough for the quick calls on a loaded machine
    return grader.grade_file(FIXTURES / name, call_seconds=3, wall_seconds=60, **limits)


def _by_item(report: grader.FileReport) -> dict:
    return {o.item: o for o in report.outcomes}


def test_each_call_failure_is_reported_and_the_rest_still_graded():
    report = _grade("broken_calls.py")
    o = _by_item(report)
    assert "NaN in your output" in o["transformer_decoder"].detail
    assert "not the pair (output, p_attn)" in o["attention"].detail
    assert "TimeoutError" in o["subsequent_mask"].detail
    assert "ValueError: boom (line 22)" in o["rate"].detail
    assert "SystemExit: 3" in o["build_causal_mask"].detail
    assert "MemoryError" in o["Embeddings"].detail
    assert o["numpy_pe"].status == "pass"  # printed 300 kB, then answered correctly
    assert "printed 606,000 characters" in o["(prints)"].detail
    assert o["LayerNorm"].status == "not found"
    assert not report.passed and report.problem is None
    assert "learner_solution" not in sys.modules


def test_syntax_error(tmp_path):
    path = tmp_path / "syntax.py"  # written here: a fixture file would fail the linter
    path.write_text("def transformer_decoder(:\n    pass\n")
    report = grader.grade_file(path, "002", call_seconds=3, wall_seconds=60)
    assert report.problem == "the file did not run: SyntaxError: invalid syntax (line 1)"
    assert not report.passed


@pytest.mark.parametrize("name,expected", [
    ("broken_exit.py", "SystemExit: 0"),
    ("broken_crash.py", "ended before finishing (exit 7)"),
])
def test_file_level_failures(name, expected):
    report = _grade(name, exercise="002")
    assert expected in report.problem
    assert not report.passed
    assert report.summary().startswith("FAIL")


def test_wall_clock_limit_kills_the_child():
    report = grader.grade_file(FIXTURES / "broken_loop.py", "002", call_seconds=60,
                               wall_seconds=3)
    assert "stopped after 3 s wall-clock" in report.problem


def test_a_file_with_a_dataclass_runs(tmp_path):
    """@dataclass looks its class's module up in sys.modules (string annotations): the
    learner's module is registered while it runs, as nanoGPT's GPTConfig needs."""
    path = tmp_path / "with_dataclass.py"
    path.write_text("from __future__ import annotations\nfrom dataclasses import dataclass\n\n"
                    "import numpy as np\n\n\n@dataclass\nclass PEConfig:\n"
                    "    base: float = 10000.0\n\n\n"
                    "def numpy_pe(pos, d, config: PEConfig = PEConfig()):\n"
                    "    angle = np.asarray(pos, float)[:, None] * config.base ** "
                    "(-np.arange(0, d, 2) / d)\n"
                    "    return np.stack([np.sin(angle), np.cos(angle)], -1)"
                    ".reshape(len(pos), d)\n")
    report = grader.grade_file(path, "000", call_seconds=2, wall_seconds=30)
    assert report.problem is None, report.problem
    assert [o.status for o in report.outcomes] == ["pass"]
    assert report.decoderkit == [] and "decoderkit" not in report.summary()  # numpy only


def test_a_file_that_takes_the_reference_from_decoderkit_is_named_in_the_report(tmp_path):
    """Teachers must see it: a name bound to a decoderkit object, or decoderkit imported
    inside a function during a call."""
    borrowed = tmp_path / "borrowed.py"
    borrowed.write_text("from decoderkit.nn.masks import causal_mask as subsequent_mask\n")
    report = grader.grade_file(borrowed, "001", call_seconds=4, wall_seconds=60)
    assert report.decoderkit == ["subsequent_mask from decoderkit.nn.masks"]
    assert ("it uses decoderkit (subsequent_mask from decoderkit.nn.masks): its answers may "
            "be the reference's own") in report.summary()
    assert report.to_json()["imports_decoderkit"] == report.decoderkit
    inside = tmp_path / "inside.py"
    inside.write_text("def numpy_pe(pos, d):\n    import decoderkit\n"
                      "    return decoderkit.__name__\n")
    assert grader.grade_file(inside, "000", call_seconds=4, wall_seconds=60).decoderkit == \
        ["decoderkit"]
