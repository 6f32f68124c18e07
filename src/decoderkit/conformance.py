"""The conformance report: every numeric claim of the seeds, recomputed with the library.

A check is a generator of ``Row``s. The seed checks (``seed_claims``) recompute a claim with
decoderkit's own functions and compare it with the value the seed prints, at a tolerance
suited to the printed precision; the self-consistency checks (``consistency``) compare two
independent paths (our attention vs PyTorch's SDPA, cache vs recomputation, ours vs PyTorch's
modules). Seed values that the seed's own printed code does not reproduce are kept as rows
with status ``erratum`` (shown, never counted as failures). A missing optional module gives a
``skip`` row. ``run_checks()`` never raises: a crashing check is a failing row.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

STATUSES = ("pass", "FAIL", "erratum", "skip")
Check = Callable[[], Iterator["Row"]]


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



def all_checks() -> tuple[Check, ...]:
    """Every check, seed claims first, then the self-consistency checks."""
    from . import consistency as c
    from . import seed_claims as s

    return (s.seed000_attention, s.seed000_parameters, s.seed000_positions, s.seed000_norms,
            s.seed000_training, s.seed000_teacher_forcing, s.seed001, s.seed002, s.seed004,
            s.seed004_block, c.consistency_attention, c.consistency_layer_norms,
            c.consistency_cache, c.consistency_attention_maps, c.consistency_padding,
            c.consistency_interop)


def check_source(check: Check) -> str:
    """The seed a check reads ("000", "001", "002", "004"), or "self" for consistency checks."""
    return "self" if check.__name__.startswith("consistency") else check.__name__[4:7]


def run_checks(checks: Sequence[Check] | None = None) -> list[Row]:
    """Run ``checks`` (default: ``all_checks()``); an optional module that is missing gives a
    ``skip`` row, a crash a ``FAIL`` row naming the error (the report always completes)."""
    rows: list[Row] = []
    for check in all_checks() if checks is None else checks:
        source = check_source(check)
        title = (check.__doc__ or check.__name__).splitlines()[0]
        try:
            rows.extend(check())
        except ModuleNotFoundError as err:
            rows.append(Row(source, title, "-", f"needs {err.name}", "skip"))
        except Exception as err:  # noqa: BLE001 - a broken check is reported, not raised
            rows.append(Row(source, title, "-", f"error: {type(err).__name__}: {err}", "FAIL"))
    return rows


def format_table(rows: Sequence[Row]) -> str:
    """The report as an aligned text table, with a summary line of counts per status."""
    head = Row("source", "claim", "expected", "ours", "result")
    table = [(r.source, r.claim, r.expected, r.ours, r.status) for r in (head, *rows)]
    limits = (8, 50, 30, 30, 7)
    widths = [min(max(len(line[i]) for line in table), limits[i]) for i in range(5)]
    lines = ["  ".join(line[i][:widths[i]].ljust(widths[i]) for i in range(5)).rstrip()
             for line in table]
    lines.insert(1, "  ".join("-" * w for w in widths))
    counts = {s: sum(r.status == s for r in rows) for s in STATUSES}
    lines.append(", ".join(f"{n} {s}" for s, n in counts.items() if n))
    return "\n".join(lines)
