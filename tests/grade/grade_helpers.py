"""Grading in-process for tests: the planted solutions are ours, so one process grades many.

The child's own ``execute`` runs the plan (the same code path as in the child process); only
the subprocess around it is skipped. The sandbox itself is tested with real files.
"""

from __future__ import annotations

from pathlib import Path

import torch

from decoderkit.grade import child, grader
from decoderkit.grade.sandbox import ChildRun

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "grade"


def fixture_source(name: str) -> str:
    return (FIXTURES / name).read_text()


def grade_source(source: str, items) -> grader.FileReport:
    """Plan, run in this process and judge ``items`` on a solution's source text."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # thousands of tiny ops: as the CLI runs them
    try:
        calls, inputs, judges = grader.plan(items)
        space = {"__name__": "learner_solution", "__file__": "<planted>"}
        exec(compile(source, "<planted>", "exec"), space)
        results: dict[str, dict] = {}
        child.execute(space, [c.to_json() for c in calls], inputs.tensors, torch,
                      results.__setitem__)
        run = ChildRun(results=results, found=[i.name for i in items if i.name in space])
        return grader.verdicts(items, judges, run, "<planted>")
    finally:
        torch.set_num_threads(threads)


def plant(mistake: str, file: str, old: str, new: str) -> str:
    """The fixture's source with ``mistake`` planted (``old`` replaced by ``new``)."""
    source = fixture_source(file)
    assert source.count(old) == 1, f"{mistake}: the text to replace must occur once in {file}"
    return source.replace(old, new)
