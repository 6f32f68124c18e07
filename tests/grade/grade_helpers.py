"""Grading in-process for tests: the planted solutions are ours, so one process grades many.

The child's own ``execute`` runs the plan (the same code path as in the child process); only
the subprocess around it is skipped. The sandbox itself is tested with real files.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path

import torch

from decoderkit.grade import grader
from decoderkit.grade.run.child.main import execute
from decoderkit.grade.run.child.values import defines
from decoderkit.grade.run.sandbox import ChildRun

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "grade"


def fixture_source(name: str) -> str:
    return (FIXTURES / name).read_text()


def grade_source(source: str, items) -> grader.FileReport:
    """Plan, run in this process and judge ``items`` on a solution's source text."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # thousands of tiny ops: as the CLI runs them
    try:
        calls, inputs, judges = grader.plan(items)
        module = types.ModuleType("learner_solution")  # as the child: @dataclass finds it
        module.__file__ = "<planted>"
        sys.modules[module.__name__] = module
        space = module.__dict__
        try:
            exec(compile(source, "<planted>", "exec"), space)
        finally:
            del sys.modules[module.__name__]
        results: dict[str, dict] = {}
        execute(space, [c.to_json() for c in calls], inputs.tensors, torch,
                      results.__setitem__)
        run = ChildRun(results=results, found=[i.name for i in items
                                               if defines(space, i.name)])
        return grader.verdicts(items, judges, run, "<planted>")
    finally:
        torch.set_num_threads(threads)


def plant(mistake: str, file: str, old: str, new: str) -> str:
    """The fixture's source with ``mistake`` planted (``old`` replaced by ``new``)."""
    source = fixture_source(file)
    assert source.count(old) == 1, f"{mistake}: the text to replace must occur once in {file}"
    return source.replace(old, new)
