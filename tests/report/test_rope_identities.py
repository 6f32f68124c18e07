"""RoPE's identities in ``decoderkit check``: they pass with nn.rope, and a wrong rotation or
frequency fails the row that states it."""

from __future__ import annotations

import torch

from decoderkit.nn.rope import RopeSpec
from decoderkit.report.conformance import all_checks, run_checks
from decoderkit.report.lm import rope_identities


def _failed() -> set[str]:
    return {r.claim for r in run_checks([rope_identities.consistency_rope])
            if r.status != "pass"}


def test_the_identities_hold_and_are_part_of_check():
    assert rope_identities.consistency_rope in all_checks()
    rows = run_checks([rope_identities.consistency_rope])
    assert len(rows) == 5 and _failed() == set()


def test_a_reversed_rotation_fails_the_complex_form_only(monkeypatch):
    true = rope_identities.rotate
    monkeypatch.setattr(rope_identities, "rotate", lambda x, cos, sin: true(x, cos, -sin))
    assert _failed() == {"RoPE rotate-half = (x1 + i x2) e^(i p w)"}


def test_frequencies_without_the_two_fail(monkeypatch):
    def wrong(self):  # theta^(-i/d): every pair but the first too fast
        return 1.0 / self.theta ** (torch.arange(self.d_k // 2).float() / self.d_k)

    monkeypatch.setattr(RopeSpec, "frequencies", wrong)
    assert _failed() == {"RoPE w_i = theta^(-2i/d), theta 10000",
                         "RoPE w_i = theta^(-2i/d), theta 500000"}


def test_an_absolute_term_fails_the_offset_identity(monkeypatch):
    true = rope_identities.rotate
    monkeypatch.setattr(rope_identities, "rotate", lambda x, cos, sin: true(x, cos, sin) * cos)
    assert "RoPE q(p).k(p') = q(p+37).k(p'+37)" in _failed()
