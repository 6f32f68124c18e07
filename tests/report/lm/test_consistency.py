"""The decoder-only LM's rows of ``decoderkit check``: they pass against transformers, and each
is a skip row naming transformers when it cannot be imported."""

from __future__ import annotations

import sys

import pytest

from decoderkit.report.lm import consistency as consistency_lm
from decoderkit.report.conformance import run_checks

CHECKS = [consistency_lm.consistency_hf_gpt2, consistency_lm.consistency_openai_gpt,
          consistency_lm.consistency_nanogpt, consistency_lm.consistency_lm_cache,
          consistency_lm.consistency_hf_llama]


def test_lm_rows_pass():
    pytest.importorskip("transformers")
    rows = run_checks(CHECKS)
    assert len(rows) == 7 and all(r.status == "pass" for r in rows), rows
    assert any("GPT-2" in r.claim and "greedy" in r.claim for r in rows)
    assert any("Llama" in r.claim for r in rows) and any("Qwen3" in r.claim for r in rows)


def test_without_transformers_each_check_is_a_skip_row_naming_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)  # importing it now fails
    rows = run_checks(CHECKS)
    assert [r.status for r in rows] == ["skip"] * 5
    assert all(r.ours == "needs transformers" for r in rows)
    assert "nanoGPT" in rows[2].claim and "cached" in rows[3].claim
