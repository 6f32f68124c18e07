"""Untrusted code in a real child process: each failure mode becomes a clear report line and a
failing verdict; the grader never crashes or hangs, and the learner's code never runs here."""

import json
import os
import shutil
import subprocess
import sys

import pytest
from grade.grade_helpers import FIXTURES
from grade.run.run_helpers import NUMPY_PE

from decoderkit.grade import grader
from decoderkit.grade.run import sandbox


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


def test_a_nul_byte_is_named_by_its_byte_offset_and_line(tmp_path):
    """compile() says only that the source holds a NUL byte (its line is None): the report names
    where, in a file and in a notebook cell; a SyntaxError the learner's own code raises is
    placed by its traceback, never "(line None)"."""
    path = tmp_path / "nul.py"
    path.write_bytes("# é\nx = 1\0\n".encode())
    report = grader.grade_file(path, "000", call_seconds=3, wall_seconds=60)
    assert report.problem == ("the file did not run: SyntaxError: the source holds a NUL byte at "
                              "byte offset 10 (line 2)")
    cell = {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None}
    notebook = tmp_path / "nul.ipynb"
    notebook.write_text(json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [
        dict(cell, id="a", source="x = 1\n"), dict(cell, id="b", source="y = 2\nz = '\0'\n")]}))
    report = grader.grade_file(notebook, "000", call_seconds=3, wall_seconds=60)
    assert report.problem == ("the file did not run: SyntaxError: the source holds a NUL byte at "
                              "byte offset 11 (cell 2, line 2)")
    path.write_text("x = 1\nraise SyntaxError('made by the file')\n")
    report = grader.grade_file(path, "000", call_seconds=3, wall_seconds=60)
    assert report.problem == "the file did not run: SyntaxError: made by the file (line 2)"


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


def test_a_file_that_takes_the_reference_from_decoderkit_is_named_in_the_report(tmp_path,
                                                                              sandbox_off):
    """Without the sandbox (which hides decoderkit: test_bwrap.py) teachers must see it: a
    name bound to a decoderkit object, or decoderkit imported inside a function during a
    call."""
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


def test_a_lazy_import_of_decoderkit_is_seen_even_when_the_file_hides_it(tmp_path,
                                                                         sandbox_off):
    """Imported inside a call, then dropped from sys.modules; or a module that imports nothing
    loaded by path with importlib under another name: the child's audit hook saw it (without
    the sandbox, which hides decoderkit)."""
    compute = NUMPY_PE.split("import numpy as np\n")[1]
    errors = grader.__file__.replace("grade/grader.py", "base/errors.py")
    for body in ["    import decoderkit.nn.masks  # noqa: F401\n",
                 "    import importlib.util\n"
                 f"    spec = importlib.util.spec_from_file_location('m', {errors!r})\n"
                 "    spec.loader.exec_module(importlib.util.module_from_spec(spec))\n"]:
        path = tmp_path / "hides.py"
        path.write_text("import sys\n\n\ndef numpy_pe(pos, d):\n    import numpy as np\n" + body
                        + "    for name in [m for m in sys.modules if 'decoderkit' in m]:\n"
                        "        del sys.modules[name]\n" + compute)
        report = grader.grade_file(path, "000", call_seconds=4, wall_seconds=60)
        assert report.passed and report.decoderkit == ["decoderkit"], report.summary()
        assert "it uses decoderkit (decoderkit): its answers may be" in report.summary()


def test_set_limit_takes_the_lower_of_the_callers_limit_and_ours():
    """In a fresh interpreter (a limit lowered cannot be raised back): a caller's lower soft
    limit is kept for soft and hard, an unlimited one gets ours, a higher one ours."""
    script = ("import resource as r\n"
              "from decoderkit.grade.run.sandbox import set_limit\n"
              "G = 1024 ** 3\n"
              "r.setrlimit(r.RLIMIT_AS, (3 * G, 4 * G))\n"
              "set_limit(r.RLIMIT_AS, 6 * G)\n"
              "r.setrlimit(r.RLIMIT_FSIZE, (r.RLIM_INFINITY, r.RLIM_INFINITY))\n"
              "set_limit(r.RLIMIT_FSIZE, 64 * 2 ** 20)\n"
              "r.setrlimit(r.RLIMIT_CPU, (600, 900))\n"
              "set_limit(r.RLIMIT_CPU, 60)\n"
              "print([r.getrlimit(k) for k in (r.RLIMIT_AS, r.RLIMIT_FSIZE, r.RLIMIT_CPU)])\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300, check=True)
    g = 1024 ** 3
    assert done.stdout.strip() == str([(3 * g, 3 * g), (64 * 2 ** 20, 64 * 2 ** 20), (60, 60)])


def test_grade_runs_under_a_callers_ulimit_v(tmp_path):
    """`grade` under `ulimit -v` (prlimit; as root also without CAP_SYS_RESOURCE, as an
    ordinary user is, who cannot raise a hard limit): the file runs under the caller's limit."""
    limit = 5 * 1024 ** 3  # under ours (MEMORY_BYTES), over what the grader and torch need
    assert limit < sandbox.MEMORY_BYTES
    path = tmp_path / "limited.py"
    path.write_text("import resource\nlimit = resource.getrlimit(resource.RLIMIT_AS)\n"
                    f"assert limit == ({limit}, {limit}), f'RLIMIT_AS {{limit}}'\n" + NUMPY_PE)
    drop = ["setpriv", "--bounding-set", "-sys_resource"] if os.geteuid() == 0 and \
        shutil.which("setpriv") else []
    if shutil.which("prlimit") is None:
        pytest.skip("needs util-linux's prlimit")
    done = subprocess.run(["prlimit", f"--as={limit}", *drop, sys.executable, "-c",
                           "import sys; from decoderkit.cli import main; "
                           "sys.exit(main(sys.argv[1:]))", "grade", str(path), "--exercise",
                           "000"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"PASS  {path}: 1 pass" in done.stdout
