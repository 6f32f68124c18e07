"""``decoderkit check``: the conformance report (exit status 1 on any failing row)."""

from __future__ import annotations

import argparse

from decoderkit.report import conformance


def add(sub) -> None:
    """The subcommand with its source filter."""
    p = sub.add_parser("check", help="conformance report: every numeric claim of the seeds",
                       description="Recompute every numeric claim of the seeds and the "
                       "self-consistency checks; print claim, expected, ours, result. Exit "
                       "status 1 if any row fails.")
    p.add_argument("--source", nargs="+", choices=conformance.SOURCES,
                   help="only rows from these seeds ('self': consistency checks)")
    p.add_argument("--problems", action="store_true", help="print only rows that did not pass")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Print the report table (or only its problems); 1 if a row failed, else 0."""
    wanted = args.source or conformance.SOURCES
    rows = conformance.run_checks([c for c in conformance.all_checks()
                                   if conformance.check_source(c) in wanted])
    shown = [r for r in rows if r.status != "pass" or not args.problems]
    print(conformance.format_table(shown) if shown else f"all {len(rows)} rows pass")
    return 1 if any(r.status == "FAIL" for r in rows) else 0
