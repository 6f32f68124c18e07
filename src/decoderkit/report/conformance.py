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

from decoderkit.report.lm import consistency as lm
from decoderkit.report.lm.rope_identities import consistency_rope
from decoderkit.report.seq2seq import consistency as c
from decoderkit.report.seq2seq import seed_claims as s
from decoderkit.report.rows import STATUSES, Row

Check = Callable[[], Iterator[Row]]
SOURCES = ("000", "001", "002", "004", "self")  # the seeds read; self: consistency checks


def all_checks() -> tuple[Check, ...]:
    """Every check, seed claims first, then the self-consistency checks."""
    return (s.seed000_attention, s.seed000_parameters, s.seed000_positions, s.seed000_norms,
            s.seed000_training, s.seed000_teacher_forcing, s.seed001, s.seed002, s.seed004,
            s.seed004_block, consistency_rope, c.consistency_attention, c.consistency_layer_norms,
            c.consistency_cache, c.consistency_attention_maps, c.consistency_padding,
            c.consistency_interop, c.consistency_marian, lm.consistency_hf_gpt2,
            lm.consistency_openai_gpt, lm.consistency_nanogpt, lm.consistency_lm_cache,
            lm.consistency_hf_llama)


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
