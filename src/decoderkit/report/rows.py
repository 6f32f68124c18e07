"""The rows of the conformance report and the helpers that build them.

A check (see ``decoderkit.report.conformance``) yields ``Row``s; ``near`` compares numbers at
a tolerance, ``equal`` exact values. A row's status is one of ``STATUSES``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

STATUSES = ("pass", "FAIL", "erratum", "skip")



@dataclass(frozen=True)
class Row:
    """One line of the report."""

    source: str  # where the claim comes from: "000 §3", "004 #13", or "self" for consistency
    claim: str  # the claim, in a few words
    expected: str  # the seed's (or the reference path's) value, as printed
    ours: str  # what the library computes
    status: str  # one of STATUSES


def _fmt(x) -> str:
    if isinstance(x, (int, np.integer)) and not isinstance(x, bool):
        return f"{x:,}"
    if isinstance(x, (float, np.floating)):
        return f"{x:.10g}"
    return str(x)


def near(source: str, claim: str, expected, ours, tol: float, erratum: bool = False) -> Row:
    """Row comparing numbers (scalars or equal-shaped arrays): pass iff max |diff| <= tol.

    ``erratum``: the seed's value is known not to follow from its own code; shown, never failed.
    """
    e, o = np.asarray(expected, dtype=np.float64), np.asarray(ours, dtype=np.float64)
    if e.shape != o.shape:
        return Row(source, claim, f"shape {e.shape}", f"shape {o.shape}", "FAIL")
    err = float(np.max(np.abs(o - e))) if e.size else 0.0
    ok = err <= tol  # NaN compares False
    if e.size == 1:
        shown_e, shown_o = _fmt(float(e)), _fmt(float(o))
    else:
        shown_e = "(" + ", ".join(f"{v:.6g}" for v in e.ravel()) + ")"
        shown_o = "(" + ", ".join(f"{v:.6g}" for v in o.ravel()) + ")"
        if max(len(shown_e), len(shown_o)) > 30:  # too wide for the table: summarise
            shown_e, shown_o = f"{e.size} values", f"max |diff| {err:.1e}"
    status = "erratum" if erratum and not ok else ("pass" if ok else "FAIL")
    return Row(source, claim, shown_e, shown_o, status)


def equal(source: str, claim: str, expected, ours) -> Row:
    """Row comparing exact values (counts, shapes, flags); long values are summarised."""
    ok = expected == ours
    shown_e, shown_o = _fmt(expected), _fmt(ours)
    if len(shown_e) > 30:
        shown_e, shown_o = f"{len(shown_e)} characters", "identical" if ok else "different"
    return Row(source, claim, shown_e, shown_o, "pass" if ok else "FAIL")
