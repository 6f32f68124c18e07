"""Grade learner files: one child process per file for all its items, verdicts per item,
a summary line per file, and the JSON a teacher collects for a class.
"""

from __future__ import annotations

import json
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

from decoderkit.base.errors import UsageError
from decoderkit.base.files import check_input_file, output_mark, write_output
from decoderkit.grade.judge.catalogue import BY_NAME
from decoderkit.grade.run.child.main import CALL_SECONDS
from decoderkit.grade.judge.items import Inputs, Item, Judge
from decoderkit.grade.judge.judging import Outcome
from decoderkit.grade.run.notebook import read_notebook
from decoderkit.grade.run.sandbox import WALL_SECONDS, Call, ChildRun, run_child
from decoderkit.grade.seeds import BY_SEED, ITEMS, REGISTRY, SEEDS

NOT_IMPLEMENTED = "not implemented yet: it raises NotImplementedError (write it, then grade again)"
JSON_COMMAND = "grade"  # the command whose mark a report carries (base.files.output_mark)
FILE = "FILE"  # a graded path's role in a refusal: "FILE x is a directory, not a regular file"
PRINT_LIMIT = 100_000  # characters a file may print before that is itself a failure


@dataclass
class FileReport:
    """Everything graded in one file."""

    path: str
    outcomes: list[Outcome] = field(default_factory=list)
    problem: str | None = None  # the file as a whole did not run (syntax error, timeout...)
    printed: int = 0  # characters the learner's code printed
    defined: dict[str, str] = field(default_factory=dict)  # item -> "cell 3: first line"
    skipped: list[str] = field(default_factory=list)  # notebook lines not run: "cell 1: %..."
    decoderkit: list[str] = field(default_factory=list)  # what it takes from decoderkit
    left_running: int = 0  # processes it started that were still running at its end (killed)
    scope: str | None = None  # why only some seeds' items were judged (``scope``)

    @property
    def passed(self) -> bool:
        """True when the file ran and every item it defines passes (and it defines one)."""
        found = [o for o in self.outcomes if o.status != "not found"]
        return self.problem is None and bool(found) and all(o.status == "pass" for o in found)

    def summary(self) -> str:
        counts = {s: sum(o.status == s for o in self.outcomes)
                  for s in ("pass", "FAIL", "not found")}
        head = "PASS" if self.passed else "FAIL"
        text = (f"{head}  {self.path}: {counts['pass']} pass, {counts['FAIL']} fail, "
                f"{counts['not found']} not found")
        failed = [o.item + (f" ({o.diagnoses[0][0]})" if o.diagnoses else "")
                  for o in self.outcomes if o.status == "FAIL"]
        if failed:
            text += f" [failed: {', '.join(failed)}]"
        if self.skipped:
            text += f"; {len(self.skipped)} IPython line(s) not run"
        if self.decoderkit:
            text += (f"; it uses decoderkit ({', '.join(self.decoderkit[:3])}"
                     f"{', ...' if len(self.decoderkit) > 3 else ''}): its answers may be "
                     f"the reference's own")
        if self.left_running:
            text += f"; it left {self.left_running} process(es) running (killed)"
        if self.scope:
            text += f"; {self.scope}"
        if self.problem:
            text += f"; {self.problem}"
        elif not counts["pass"] + counts["FAIL"]:
            text += "; no gradable item found (see decoderkit grade --list)"
        return text

    def to_json(self) -> dict:
        return {"file": self.path, "passed": self.passed, "problem": self.problem,
                "printed_chars": self.printed, "skipped": self.skipped,
                "imports_decoderkit": self.decoderkit, "left_running": self.left_running,
                "scope": self.scope,
                "items": [dict(o.to_json(), defined_in=self.defined.get(o.item))
                          for o in self.outcomes]}


def select(exercise: str | None) -> tuple[Item, ...]:
    """The items of one seed, or all of them."""
    if exercise is not None and exercise not in SEEDS:
        raise UsageError(f"--exercise must be one of {', '.join(SEEDS)}, got {exercise!r}")
    return tuple(i for i in ITEMS if exercise is None or i.seed == exercise)


def plan(items: tuple[Item, ...]) -> tuple[list[Call], Inputs, dict[str, Judge]]:
    """Every item's calls into one plan (one child runs them all), with each item's judge."""
    inputs, calls, judges = Inputs(), [], {}
    for item in items:
        item_calls, judge = item.prepare(inputs)
        calls += item_calls
        judges[item.name] = judge
    return calls, inputs, judges


def verdicts(items: tuple[Item, ...], judges: dict[str, Judge], run: ChildRun,
             path: str) -> FileReport:
    """Judge each found item of one child's run."""
    report = FileReport(path, problem=run.problem, printed=run.printed,
                        decoderkit=run.decoderkit, left_running=run.left_running)
    for item in items:
        if item.name not in run.found:
            report.outcomes.append(Outcome(item.name, item.seed, "not found"))
        else:
            outcome = judges[item.name](run.results)
            if outcome.status == "FAIL" and "NotImplementedError" in outcome.detail:
                outcome = Outcome(item.name, item.seed, "FAIL", NOT_IMPLEMENTED)
            report.outcomes.append(outcome)
    if run.printed > PRINT_LIMIT:
        report.outcomes.append(Outcome("(prints)", "-", "FAIL",
                                       f"the file printed {run.printed:,} characters "
                                       f"(more than {PRINT_LIMIT:,}); only the first were kept"))
    return report


def scope(items: tuple[Item, ...], found: list[str] | set[str],
          exercise: str | None) -> tuple[tuple[Item, ...], str | None]:
    """With no --exercise, a file that defines an item of an exclusive seed (``Seed.exclusive``:
    Week 3's decoder-only model files) is judged on that seed's items only, with its note."""
    if exercise is not None:
        return items, None
    for seed in REGISTRY:
        if seed.exclusive and any(i.seed == seed.name and i.name in found for i in items):
            return tuple(i for i in items if i.seed == seed.name), seed.exclusive
    return items, None


def check_files(paths: list[str]) -> None:
    """Every file exists and every notebook reads, before any is graded (a class set stops
    at once on a damaged file, not after grading the others)."""
    for path in paths:
        path = check_input_file(path, FILE)
        if path.suffix == ".ipynb":
            read_notebook(path)


def grade_file(path: str | Path, exercise: str | None = None,
               wall_seconds: float = WALL_SECONDS,
               call_seconds: int = CALL_SECONDS) -> FileReport:
    """Run the file's items in one child process and judge each one."""
    path = check_input_file(path, FILE)  # a folder or a pipe named as such, never read
    nb = read_notebook(path) if path.suffix == ".ipynb" else None
    items = select(exercise)
    calls, inputs, judges = plan(items)
    run = run_child(path, calls, inputs.tensors, [i.name for i in items], wall_seconds,
                    call_seconds, sources=nb.sources() if nb else None)
    items, note = scope(items, run.found, exercise)
    report = verdicts(items, judges, run, str(path))
    report.scope = note
    if nb is not None:
        report.defined, report.skipped = nb.defined_in(run.found), nb.skipped
        if report.problem and nb.skipped:
            report.problem += (" (the notebook may need the IPython lines that were not run, "
                               "listed above)")
    return report


def format_report(report: FileReport, verbose: bool = True) -> str:
    """The per-item lines a learner reads, then the file's summary line."""
    lines = []
    ran = any(o.status != "not found" for o in report.outcomes)
    for o in report.outcomes if verbose and ran else []:
        if o.status == "not found":
            continue
        where = f" [{report.defined[o.item]}]" if o.item in report.defined else ""
        lines.append(f"  {o.status:<9}  {o.seed}  {o.item}{where}"
                     + (f": {o.detail}" if o.detail else ""))
        for rank, (name, err) in enumerate(o.diagnoses):
            m = BY_NAME[name]
            lines.append(f"             {'diagnosis' if rank == 0 else 'also matches'}: "
                         f"{m.title} (error {err:.2g} of tolerance)")
            if rank == 0:
                lines.append(textwrap.fill(m.explanation, 100, initial_indent=" " * 15,
                                           subsequent_indent=" " * 15))
                lines.append(f"               spec: {m.formula}  [seed {m.source}]")
        lines += [f"             note: {n}" for n in o.notes]
    missing = [o.item for o in report.outcomes if o.status == "not found"]
    if verbose and ran and missing:
        lines.append(f"  not found  {', '.join(missing)}")
    lines += [f"  skipped    {line} (IPython, not run)" for line in report.skipped
              if verbose]
    lines.append(report.summary())
    return "\n".join(lines)


def write_json(reports: list[FileReport], path: str | Path, flag: str = "--json") -> None:
    """All files' reports as one JSON document, written atomically; ``path`` may only be new
    or an earlier report (``base.files.check_output_file``)."""
    doc = {"written_by": output_mark(JSON_COMMAND), "files": [r.to_json() for r in reports],
           "passed": sum(r.passed for r in reports), "total": len(reports)}
    write_output(path, flag, JSON_COMMAND, lambda tmp: tmp.write_text(json.dumps(doc, indent=1)))


def format_list(exercise: str | None = None) -> str:
    """``--list``: every seed's title, then its items: signature, spec, how it is judged."""
    lines, seed = [], None
    for item in select(exercise):
        if item.seed != seed:
            seed = item.seed
            lines.append(f"seed {seed}: {BY_SEED[seed].title}")
        lines.append(f"{item.seed}  {item.signature}")
        lines.append(f"      {item.spec}")
        lines.append(f"      judged: {item.judged}; diagnoses: {', '.join(item.mistakes) or '-'}")
    lines.append(f"{len(BY_NAME)} named mistakes in the catalogue; items not defined in a "
                 f"file are reported as 'not found', never as failures.")
    return "\n".join(lines)
