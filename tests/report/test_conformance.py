"""The conformance report: it passes on the library; rows, runner and table behave."""

from __future__ import annotations

import math

import numpy as np
import pytest

from decoderkit.report.conformance import all_checks, check_source, format_table, run_checks
from decoderkit.report.rows import Row, equal, near


@pytest.fixture(scope="module")
def rows() -> list[Row]:
    return run_checks()


def test_every_row_passes_or_is_a_documented_erratum(rows):
    bad = [r for r in rows if r.status not in ("pass", "erratum")]
    assert not bad, format_table(bad)
    assert sum(r.status == "pass" for r in rows) >= 60


def test_every_seed_and_the_consistency_checks_are_covered(rows):
    assert {check_source(c) for c in all_checks()} == {"000", "001", "002", "004", "self"}
    assert {r.source.split()[0] for r in rows} == {"000", "001", "002", "004", "self"}
    claims = " ".join(r.claim for r in rows)
    for needle in ("decoder layer", "six decoder layers", "warm-up", "4-class example loss",
                   "cached decode", "from_torch", "transformer_decoder", "MHA fast"):
        assert needle in claims


def test_near_compares_within_tolerance_and_rejects_nan_and_shape_mismatch():
    assert near("x", "c", 1.0, 1.0 + 1e-9, 1e-8).status == "pass"
    assert near("x", "c", 1.0, 1.0 + 1e-7, 1e-8).status == "FAIL"
    assert near("x", "c", 1.0, math.nan, 1.0).status == "FAIL"
    assert near("x", "c", (1, 2), (1, 2, 3), 1.0).status == "FAIL"
    assert near("x", "c", np.zeros((5, 5)), np.eye(5), 0.5).ours == "max |diff| 1.0e+00"
    assert near("x", "c", (0.5, 1), (0.5, 1), 0.0).ours == "(0.5, 1)"  # short: shown in full
    assert near("x", "c", 1.0, 2.0, 0.1, erratum=True).status == "erratum"
    assert near("x", "c", 1.0, 1.0, 0.1, erratum=True).status == "pass"  # a fixed seed passes


def test_equal_is_exact_and_summarises_long_values():
    assert equal("x", "c", 4_204_032, 4_204_032).expected == "4,204,032"
    assert equal("x", "c", [2, 4], [2, 5]).status == "FAIL"
    long = equal("x", "c", list(range(20)), list(range(20)))
    assert (long.ours, long.status) == ("identical", "pass")
    assert equal("x", "c", list(range(20)), list(range(1, 21))).ours == "different"


def test_a_crashing_check_is_a_failing_row_naming_the_error():
    def broken():
        """Broken on purpose."""
        raise RuntimeError("boom")
        yield

    (row,) = run_checks([broken])
    assert (row.status, row.claim) == ("FAIL", "Broken on purpose.")
    assert "RuntimeError: boom" in row.ours


def test_table_has_a_header_aligned_columns_and_a_summary():
    rows = [Row("000 §3", "a claim", "1", "1", "pass"), Row("self", "b", "2", "3", "FAIL")]
    lines = format_table(rows).splitlines()
    assert lines[0].split() == ["source", "claim", "expected", "ours", "result"]
    assert set(lines[1]) == {"-", " "}
    assert lines[3].endswith("FAIL") and lines[2].index("pass") == lines[3].index("FAIL")
    assert lines[-1] == "1 pass, 1 FAIL"
