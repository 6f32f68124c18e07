"""``decoderkit grade``: check learner files against the reference (exit 1 if any item fails)."""

from __future__ import annotations

import argparse
import os
import sys

import torch

from decoderkit.base.errors import UsageError
from decoderkit.base.files import check_output_file
from decoderkit.cli.args import pathname
from decoderkit.grade import grader
from decoderkit.grade.run.bwrap import note as sandbox_note
from decoderkit.grade.seeds import SEEDS


def add(sub) -> None:
    """The subcommand: files, --exercise, --json, --list, --summary."""
    p = sub.add_parser("grade", help="check your own implementation of the seeds' exercises",
                       description="Run each learner file in a limited child process, compare "
                       "every function/class it defines that the seeds ask for with decoderkit's "
                       "reference, and name the mistake when the output matches a known one. "
                       "Exit status 0 only when every item found in every file passes.")
    p.add_argument("files", nargs="*", metavar="FILE", type=pathname,
                   help="learner .py files or .ipynb notebooks (code cells run in order)")
    p.add_argument("--exercise", choices=SEEDS, help="grade only this seed's items")
    p.add_argument("--json", metavar="PATH", type=pathname,
                   help="also write every file's report as one JSON")
    p.add_argument("--list", action="store_true", help="list the items, signatures and specs")
    p.add_argument("--summary", action="store_true",
                   help="one line per file (for a class set), no per-item lines")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Grade the files; 0 only when all found items pass, 1 otherwise."""
    if args.list:
        print(grader.format_list(args.exercise))
        return 0
    if not args.files:
        raise UsageError("give at least one FILE to grade (or --list)")
    grader.check_files(args.files)
    if args.json is not None:  # before any grading: never the graded source, nor a user's file
        graded = [f for f in args.files if os.path.exists(args.json) and os.path.exists(f)
                  and os.path.samefile(f, args.json)]
        if graded:
            raise UsageError(f"--json {args.json} is the file being graded ({graded[0]}); "
                             "name another file for the report")
        check_output_file(args.json, "--json", grader.JSON_COMMAND)
    if sandbox_note() is not None:  # bubblewrap missing or unusable: said once, graded anyway
        print(sandbox_note(), file=sys.stderr)
    torch.set_num_threads(1)  # judging runs thousands of tiny ops: extra threads only spin
    reports = []
    for path in args.files:
        report = grader.grade_file(path, args.exercise)
        print(grader.format_report(report, verbose=not args.summary), flush=True)
        reports.append(report)
    if len(reports) > 1:
        print(f"{sum(r.passed for r in reports)} of {len(reports)} files pass")
    if args.json:
        grader.write_json(reports, args.json)
    return 0 if all(r.passed for r in reports) else 1
