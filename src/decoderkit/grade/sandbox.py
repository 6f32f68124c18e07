"""Run one learner file in a child process with limits; read its results back safely.

The learner's code never runs in the grader's process: a child (``python -I child.py``) with
a wall-clock timeout, CPU, address-space and file-size limits, in its own session (killed
as a group on timeout), its own temporary directory as working directory. Results come back
as files loaded with ``torch.load(weights_only=True)``: tensors and plain data only.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import torch

from decoderkit.grade import child

WALL_SECONDS = 40  # the whole file: import + every call (each call has its own alarm)
CPU_SECONDS = 60  # RLIMIT_CPU
MEMORY_BYTES = 6 * 1024**3  # RLIMIT_AS: torch's import alone maps ~1-2 GB of address space
FILE_BYTES = 64 * 1024**2  # RLIMIT_FSIZE: no file the child writes may exceed this
OUTPUT_CAP = 4000  # characters of the child's own stdout/stderr kept for the report


@dataclass(frozen=True)
class Call:
    """One planned call into the learner's file (see ``child._run`` for the kinds)."""

    id: str  # unique within the plan; names the result file
    name: str  # the learner's function or class
    kind: str  # "call", "module", "decode004", "decode001" or "generate"
    args: tuple = ()  # argument specs: {"t": input key}, {"v": literal}, {"sublayer": key}
    init: tuple = ()  # module constructor arguments
    forwards: tuple = ()  # module: (method, arg specs) pairs
    seed: int = 0  # module: torch.manual_seed before construction, and the perturbation
    attrs: tuple = ()  # module attributes to return after the forwards (e.g. "true_dist")
    perturb: bool = True  # module: replace its initial parameters by seeded random values
    vocab: int = 0  # decode: the scripted model's vocabulary
    eos_at: int = 0  # decode: prefix length at which the scripted model emits EOS
    block: int = 0  # generate: the scripted LM's block_size

    def to_json(self) -> dict:
        return {"id": self.id, "name": self.name, "kind": self.kind, "args": list(self.args),
                "init": list(self.init), "forwards": [list(f) for f in self.forwards],
                "seed": self.seed, "attrs": list(self.attrs), "perturb": self.perturb,
                "vocab": self.vocab,
                "eos_at": self.eos_at, "block": self.block}


@dataclass
class ChildRun:
    """What came back from one child: per-call results and what went wrong overall."""

    results: dict[str, dict] = field(default_factory=dict)  # call id -> result dict
    found: list[str] = field(default_factory=list)  # planned names the file defines
    problem: str | None = None  # file-level failure (syntax error, timeout, crash)
    printed: int = 0  # characters the learner printed
    print_head: str = ""  # the first of them


def _limits() -> None:
    """preexec_fn: the child's resource limits."""
    resource.setrlimit(resource.RLIMIT_CPU, (CPU_SECONDS, CPU_SECONDS))
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))
    resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_BYTES, FILE_BYTES))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def run_child(learner: Path, calls: list[Call], inputs: dict[str, torch.Tensor],
              names: list[str], wall_seconds: float = WALL_SECONDS,
              call_seconds: int = child.CALL_SECONDS,
              sources: list[tuple[str, str]] | None = None) -> ChildRun:
    """Run ``calls`` against the learner's file in a limited child process; each call (and
    the file's top-level code, twice that) has ``call_seconds`` before it is interrupted.
    ``sources``: (label, code) pieces run in order instead of the file (a notebook's
    cells, or what ``grade(obj)`` sends)."""
    with tempfile.TemporaryDirectory(prefix="decoderkit-grade-") as tmp:
        work = Path(tmp)
        plan = {"names": names, "calls": [c.to_json() for c in calls],
                "call_seconds": call_seconds, "sources": sources}
        (work / "plan.json").write_text(json.dumps(plan))
        torch.save(inputs, work / "inputs.pt")
        target = learner if sources else learner.resolve()
        cmd = [sys.executable, "-I", child.__file__, str(work), str(target)]
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "OMP_NUM_THREADS": "1",
               "HOME": tmp}
        with open(work / "stdout.txt", "wb") as out:
            proc = subprocess.Popen(cmd, cwd=tmp, stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, preexec_fn=_limits,
                                    start_new_session=True, env=env)
            try:
                code = proc.wait(timeout=wall_seconds)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)
                proc.wait()
                code = None
        run = ChildRun()
        for c in calls:
            path = work / f"result_{c.id}.pt"
            if path.exists():
                run.results[c.id] = _load(path)
        status = _read_status(work / "status.json")
        if code is None:
            hung = next((c.name for c in calls if c.id not in run.results), None)
            run.problem = (f"stopped after {wall_seconds:g} s wall-clock"
                           + (f" while running {hung}" if hung else ""))
        elif status is None or not status.get("finished"):
            tail = (work / "stdout.txt").read_bytes()[-OUTPUT_CAP:].decode(errors="replace")
            last = tail.strip().splitlines()[-1] if tail.strip() else "no output"
            run.problem = f"the child process ended before finishing (exit {code}): {last}"
        if status is not None:
            run.found = [n for n in status.get("found", []) if n in names]
            run.printed = int(status.get("printed", 0))
            run.print_head = str(status.get("print_head", ""))[:OUTPUT_CAP]
            if not status.get("imported", False):
                run.problem = f"the file did not run: {status.get('error', '?')}"
                run.found = []
        return run


def _load(path: Path) -> dict:
    """A result file, loaded without unpickling arbitrary objects."""
    try:
        result = torch.load(path, weights_only=True)
    except Exception as err:  # noqa: BLE001 - any unreadable file is the learner's output
        return {"error": f"its result could not be read safely ({type(err).__name__})"}
    return result if isinstance(result, dict) else {"error": "malformed result"}


def _read_status(path: Path) -> dict | None:
    try:
        status = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return status if isinstance(status, dict) else None
