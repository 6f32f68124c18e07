"""Run one learner file in a child process with limits; read its results back safely.

The learner's code never runs in the grader's process, nor as its child: a child
(``python -I child/__main__.py``) under a small supervisor (``supervisor.py``) with a wall-clock
timeout, CPU, address-space and file-size limits (each the lower of ours and the caller's:
``set_limit``), in its own session, its own temporary directory as working directory. Where
the machine allows it the supervisor and the child run inside bubblewrap (``bwrap``: read-only
files, the user's hidden, no network, their own PID namespace). When it ends, every process it
started is killed: its group, the orphans re-parented to the supervisor, and anything carrying
the run's marker (found again here should the file have killed the supervisor). Results come
back as files loaded with ``torch.load(weights_only=True)``: tensors and plain data only.
"""

from __future__ import annotations

import json
import os
import resource
import secrets
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from decoderkit.grade.run import bwrap, supervisor
from decoderkit.grade.run.child import main as child

WALL_SECONDS = 40  # the whole file: import + every call (each call has its own alarm)
CPU_SECONDS = 60  # RLIMIT_CPU
MEMORY_BYTES = 6 * 1024**3  # RLIMIT_AS: torch's import alone maps ~1-2 GB of address space
FILE_BYTES = 64 * 1024**2  # RLIMIT_FSIZE: no file the child writes may exceed this
OUTPUT_CAP = 4000  # characters of the child's own stdout/stderr kept for the report
GRACE_SECONDS = 30 + supervisor.KILL_ROUNDS_SECONDS  # the supervisor's start and clean-up
CHILD_SCRIPT = Path(child.__file__).with_name("__main__.py")  # run with python -I
PACKAGE_DIR = bwrap.LIBRARY  # decoderkit's own sources: the child watches opens there


@dataclass(frozen=True)
class Call:
    """One planned call into the learner's file (``child.kinds.KINDS`` runs each kind)."""

    id: str  # unique within the plan; names the result file
    name: str  # the learner's function or class
    kind: str  # "call", "module", "generate", "generate_cached", "decode_step",
    #            "decode_annotated"
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
    left_running: int = 0  # processes it started that still ran at the end (all killed)
    decoderkit: list[str] = field(default_factory=list)  # "name from decoderkit.module"


def set_limit(kind: int, ours: int) -> None:
    """Set resource limit ``kind`` (soft and hard) to ``ours`` or to the caller's own soft
    limit, the lower: a caller's ``ulimit -v`` is kept (and could not be raised anyway)."""
    soft, _ = resource.getrlimit(kind)
    value = ours if soft == resource.RLIM_INFINITY else min(soft, ours)
    resource.setrlimit(kind, (value, value))


def _limits() -> None:
    """preexec_fn: the child's resource limits."""
    set_limit(resource.RLIMIT_CPU, CPU_SECONDS)
    set_limit(resource.RLIMIT_AS, MEMORY_BYTES)
    set_limit(resource.RLIMIT_FSIZE, FILE_BYTES)
    set_limit(resource.RLIMIT_CORE, 0)


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
        sandboxed = bwrap.unusable() is None
        plan = {"names": names, "calls": [c.to_json() for c in calls],
                "call_seconds": call_seconds, "sources": sources,
                "hidden": [*bwrap.hidden_folders(), *bwrap.library_folders()] if sandboxed
                else None,
                "decoderkit": [str(PACKAGE_DIR)]}
        (work / "plan.json").write_text(json.dumps(plan))
        torch.save(inputs, work / "inputs.pt")
        target = learner if sources else learner.resolve()
        cmd = [sys.executable, "-I", str(CHILD_SCRIPT), str(work), str(target)]
        jail = bwrap.command(work, [] if sources else [target]) if sandboxed else []
        supervised = _supervise(work, cmd, wall_seconds, jail)
        run = ChildRun()
        for c in calls:
            path = work / f"result_{c.id}.pt"
            if path.exists():
                run.results[c.id] = _load(path)
        status = _read_status(work / "status.json")
        code = None if supervised is None else supervised.get("code")
        if supervised is None:
            run.problem = ("the file killed or stopped its parent process (the grader's "
                           "supervisor); what it returned before is judged")
        elif supervised.get("stopped"):
            hung = next((c.name for c in calls if c.id not in run.results), None)
            run.problem = (f"stopped after {wall_seconds:g} s wall-clock"
                           + (f" while running {hung}" if hung else ""))
        elif status is None or not status.get("finished"):
            run.problem = f"the child process ended before finishing (exit {code}): " \
                          f"{_last_line(work / 'stdout.txt')}"
        if supervised is not None:
            run.left_running = int(supervised.get("left_running", 0))
        if status is not None:
            run.decoderkit = [str(m) for m in status.get("decoderkit", [])]
            run.found = [n for n in status.get("found", []) if n in names]
            run.printed = int(status.get("printed", 0))
            run.print_head = str(status.get("print_head", ""))[:OUTPUT_CAP]
            if not status.get("imported", False):
                run.problem = f"the file did not run: {status.get('error', '?')}"
                run.found = []
        return run


def _supervise(work: Path, cmd: list[str], wall_seconds: float,
               jail: list[str]) -> dict | None:
    """Run ``cmd`` under the supervisor in ``work`` (the supervisor under ``jail``, a bwrap
    prefix, when not empty); its report (the child's exit code, whether it was stopped, how
    many processes it left), or None if the file killed or stopped the supervisor. Whatever
    happens, no process of the run outlives this call."""
    token = secrets.token_hex(16)  # the run's marker: only its processes carry it
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "OMP_NUM_THREADS": "1",
           "HOME": str(work), "TMPDIR": str(work), supervisor.MARKER: token}
    start = time.monotonic()
    with open(work / "supervisor.log", "wb") as log:
        proc = subprocess.Popen([*jail, sys.executable, "-I", supervisor.__file__, str(work),
                                 str(wall_seconds), *cmd], cwd=work, stdin=subprocess.DEVNULL,
                                stdout=log, stderr=subprocess.STDOUT, preexec_fn=_limits,
                                start_new_session=True, env=env)
    try:
        try:
            proc.wait(timeout=wall_seconds + GRACE_SECONDS)
        except subprocess.TimeoutExpired:
            pass  # stopped (SIGSTOP) by the file: killed below
        if proc.returncode == 0:  # its report replaced anything the file wrote there
            return _read_status(work / "supervisor.json")
        if proc.returncode is not None and proc.returncode > 0:
            raise RuntimeError(f"the grading supervisor failed (exit {proc.returncode}): "
                               f"{_last_line(work / 'supervisor.log')}")
        _wait_while_marked(work / "child.pid", token, start + wall_seconds)  # still running?
        return None
    finally:  # also on KeyboardInterrupt: nothing of the run is left behind
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        supervisor.kill_marked(token)


def _wait_while_marked(pid_file: Path, token: str, deadline: float) -> None:
    """Poll until the orphaned child named in ``pid_file`` has ended or ``deadline`` passes."""
    try:
        pid = int(pid_file.read_text())
    except (OSError, ValueError):
        return
    while supervisor.marked(pid, token) and time.monotonic() < deadline:
        time.sleep(0.05)


def _last_line(path: Path) -> str:
    """The last line of the child's own output (a crash's message), or 'no output'."""
    tail = path.read_bytes()[-OUTPUT_CAP:].decode(errors="replace").strip()
    return tail.splitlines()[-1] if tail else "no output"


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
