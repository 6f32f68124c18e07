"""Seed claims: the errata are exactly the known ones, and a wrong library value fails."""

from __future__ import annotations

import torch

import decoderkit.training.objective
from decoderkit.report.seq2seq import seed_claims
from decoderkit.report.conformance import run_checks


def test_errata_are_exactly_the_seed_values_its_own_code_does_not_reproduce():
    rows = run_checks([seed_claims.seed004, seed_claims.seed004_block])
    errata = {r.claim for r in rows if r.status == "erratum"}
    assert errata == {"trap: zero after softmax, row sums",
                      "cross-attention T_dec=4, T_enc=6 weights", "dec_input[0,0] norm"}
    assert all(r.status in ("pass", "erratum") for r in rows)


def test_a_wrong_warmup_rate_fails_its_rows(monkeypatch):
    true_rate = decoderkit.training.objective.noam_rate
    monkeypatch.setattr(decoderkit.training.objective, "noam_rate",
                        lambda step, d, warmup=4000: true_rate(step, d, warmup) * 1.0001)
    failed = [r.claim for r in run_checks([seed_claims.seed000_training]) if r.status == "FAIL"]
    assert any("warm-up rates d=512" in c for c in failed)
    assert any("peak" in c for c in failed)


def test_a_wrong_positional_table_fails_its_rows(monkeypatch):
    true_pe = seed_claims.sinusoidal_encoding
    monkeypatch.setattr(seed_claims, "sinusoidal_encoding",
                        lambda n, d, dtype=torch.float32: true_pe(n, d, dtype) * (1 + 1e-6))
    failed = {r.claim for r in run_checks([seed_claims.seed000_positions])
              if r.status == "FAIL"}
    assert "||PE(p)||^2 = d/2 for all p" in failed
    assert "d=16: max |ours - formula| ~1e-7" in failed
