"""The child's run of ONE learner file, never inside the grader: ``main`` loads
``WORKDIR/plan.json`` and ``WORKDIR/inputs.pt``, runs the learner's file (or the pieces the
plan gives: a notebook's cells, what ``grade(obj)`` sends), runs every planned call
(``kinds``), and writes one ``WORKDIR/result_<id>.pt`` per call (plain tensors, numbers,
strings, lists and dicts, read back with ``weights_only=True``). ``WORKDIR/status.json``
says whether the file imported, and what it took from decoderkit (its answers may then be
the reference's own: the report says so). The learner's prints go to a capped buffer; each
call has an alarm so one endless loop costs one item.
"""

from __future__ import annotations

import io
import json
import os
import signal
import sys
import types

from .kinds import run
from .values import defines

CALL_SECONDS = 4  # default alarm per call: an endless loop fails that call, not the file
PRINT_CAP = 4000  # characters of the learner's prints kept for the report


class _CappedText(io.TextIOBase):
    """A text sink that keeps the first PRINT_CAP characters and counts the rest."""

    def __init__(self):
        self.kept, self.total = [], 0

    def write(self, text):
        self.total += len(text)
        room = PRINT_CAP - sum(len(k) for k in self.kept)
        if room > 0:
            self.kept.append(text[:room])
        return len(text)

    def writable(self):
        return True


def _from_decoderkit(space) -> list[str]:
    """What the learner's names take from decoderkit ("f from decoderkit.nn.attention"),
    or ["decoderkit"] when it was imported but no name holds it (inside a function, say)."""
    def ours(module) -> bool:
        return isinstance(module, str) and module.partition(".")[0] == "decoderkit"

    found = []
    for name, value in list(space.items()):
        try:
            module = value.__name__ if isinstance(value, types.ModuleType) else \
                getattr(value, "__module__", None)
        except BaseException:  # noqa: B036 - a learner's object may raise anything
            continue
        if ours(module):
            found.append(f"{name} from {module}")
    if not found and any(ours(m) for m in list(sys.modules)):
        found.append("decoderkit")
    return sorted(found)


def _alarm(signum, frame):
    raise TimeoutError("did not return in time (an endless loop?)")


def execute(space, calls, inputs, torch, save, seconds: int = CALL_SECONDS,
            labels=frozenset()) -> None:
    """Run each planned call whose name the learner defines; ``save(id, result)`` each."""
    signal.signal(signal.SIGALRM, _alarm)
    for call in calls:
        if not defines(space, call["name"]):
            continue
        try:
            signal.alarm(seconds)
            result = run(call, space, inputs, torch)
        except BaseException as err:  # noqa: B036 - SystemExit, KeyboardInterrupt included
            result = {"error": _describe_error(err, space.get("__file__", ""), labels)}
        finally:
            signal.alarm(0)
        save(call["id"], result)


def main(workdir: str, learner: str) -> None:
    import torch  # after the limits are in place; the learner's file imports it too
    torch.set_num_threads(1)
    plan = json.loads(open(f"{workdir}/plan.json").read())
    seconds = int(plan.get("call_seconds", CALL_SECONDS))
    inputs = torch.load(f"{workdir}/inputs.pt", weights_only=True)
    captured = _CappedText()
    real_out = sys.stdout
    sys.stdout = sys.stderr = captured
    module = types.ModuleType("learner_solution")  # registered while it runs: @dataclass
    module.__file__ = learner  # (and anything else) looks its module up in sys.modules
    sys.modules[module.__name__] = module
    space = module.__dict__
    sources = plan.get("sources") or [
        [learner, open(learner, encoding="utf-8", errors="replace").read()]]
    labels = {name for name, _ in sources} - {learner}  # notebook cells: "cell 3"
    status = {"imported": True}
    signal.signal(signal.SIGALRM, _alarm)
    try:
        signal.alarm(2 * seconds)  # the file's own top-level code
        for name, source in sources:  # a file, or a notebook's cells in order
            exec(compile(source, name, "exec"), space)
    except BaseException as err:  # noqa: B036 - the learner's code may raise anything
        status = {"imported": False, "error": _describe_error(err, learner, labels)}
    finally:
        signal.alarm(0)
    status["found"] = sorted(n for n in plan["names"] if defines(space, n))
    status["decoderkit"] = _from_decoderkit(space)
    calls = plan["calls"] if status["imported"] else []
    _write_status(workdir, status)  # already known, should a call hang or kill the process

    def save(call_id, result):
        sys.stdout = sys.stderr = captured  # the learner may have replaced them
        torch.save(result, f"{workdir}/result_{call_id}.pt")

    execute(space, calls, inputs, torch, save, seconds, labels)
    status.update(printed=captured.total, print_head="".join(captured.kept), finished=True,
                  decoderkit=_from_decoderkit(space))
    _write_status(workdir, status)
    real_out.flush()


def _write_status(workdir: str, status: dict) -> None:
    with open(f"{workdir}/status.tmp", "w") as f:
        json.dump(status, f)
    os.replace(f"{workdir}/status.tmp", f"{workdir}/status.json")


def _describe_error(err: BaseException, learner: str, labels=frozenset()) -> str:
    """``Type: message`` plus the learner-file line (or notebook cell and line) it came
    from, when there is one."""
    tb, where = err.__traceback__, ""
    while tb is not None:
        name = tb.tb_frame.f_code.co_filename
        if learner and name == learner or name in labels:
            where = f" ({_place(name, tb.tb_lineno, labels)})"
        tb = tb.tb_next
    if isinstance(err, SyntaxError):
        return f"{type(err).__name__}: {err.msg} ({_place(err.filename, err.lineno, labels)})"
    text = str(err).splitlines()[0][:300] if str(err).strip() else ""
    return f"{type(err).__name__}{': ' + text if text else ''}{where}"


def _place(name: str, line, labels) -> str:
    """'line 7' in the file, 'cell 3, line 7' in a notebook cell."""
    return f"{name}, line {line}" if name in labels else f"line {line}"
