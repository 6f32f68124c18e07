"""Self-consistency checks: they pass, fail when one path drifts, and skip a missing module."""

from __future__ import annotations

import sys

from decoderkit.report.seq2seq import consistency
from decoderkit.report.conformance import run_checks


def test_a_drifting_fast_path_fails_the_backend_rows(monkeypatch):
    sdpa = consistency.F.scaled_dot_product_attention
    monkeypatch.setattr(consistency.F, "scaled_dot_product_attention",
                        lambda *a, **k: sdpa(*a, **k) + 1e-9)
    rows = run_checks([consistency.consistency_attention])
    failed = {r.claim for r in rows if r.status == "FAIL"}
    assert failed == {"MHA fast (SDPA) = reference, causal+padding",
                      "MHA fast (SDPA) = reference, source padding",
                      "MHA fast (SDPA) = reference, none",
                      "attention() = F.scaled_dot_product_attention"}


def test_cache_and_padding_checks_pass():
    rows = run_checks([consistency.consistency_cache, consistency.consistency_padding])
    assert rows and all(r.status == "pass" for r in rows), rows


def test_a_missing_optional_module_gives_a_skip_row(monkeypatch):
    monkeypatch.setitem(sys.modules, "decoderkit.interop.torch_nn", None)  # importing it now fails
    (row,) = run_checks([consistency.consistency_interop])
    assert row.status == "skip" and "decoderkit.interop.torch_nn" in row.ours


def test_marian_rows_pass_and_fail_when_the_model_differs(monkeypatch):
    rows = run_checks([consistency.consistency_marian])
    assert len(rows) == 3 and all(r.status == "pass" for r in rows), rows
    import decoderkit.interop.marian.hf as marian

    monkeypatch.setitem(marian.ACTIVATIONS, "swish", "relu")  # read as another model
    rows = run_checks([consistency.consistency_marian])
    assert rows[0].status == "FAIL", rows


def test_marian_rows_skip_without_transformers(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)
    (row,) = run_checks([consistency.consistency_marian])
    assert row.status == "skip" and "transformers" in row.ours
