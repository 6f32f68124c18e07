"""The child's run of ONE learner file, never inside the grader: ``main`` loads
``WORKDIR/plan.json`` and ``WORKDIR/inputs.pt``, runs the learner's file (or the pieces the
plan gives: a notebook's cells, what ``grade(obj)`` sends), runs every planned call
(``kinds``), and writes one ``WORKDIR/result_<id>.pt`` per call (plain tensors, numbers,
strings, lists and dicts, read back with ``weights_only=True``). ``WORKDIR/status.json``
says whether the file imported, and what it took from decoderkit (its answers may then be
the reference's own: the report says so), seen by an audit hook installed before the file
runs (``watch_decoderkit``). The learner's prints go to a capped buffer; each call has an
alarm so one endless loop costs one item. Inside the grader's sandbox an error the sandbox
caused (a read-only file system, a hidden folder, no network) says so (``_sandbox_refusal``).
"""

from __future__ import annotations

import errno
import io
import json
import os
import signal
import socket
import sys
import types

from .kinds import run
from .values import defines

CALL_SECONDS = 4  # default alarm per call: an endless loop fails that call, not the file
PRINT_CAP = 4000  # characters of the learner's prints kept for the report
PACKAGE_PART = f"{os.sep}decoderkit{os.sep}"  # in the path of every copy of decoderkit's files
SANDBOX_ERRNOS = {  # errors the grader's sandbox causes -> what the report adds
    errno.EROFS: "only its working folder is writable",
    errno.EACCES: "your files and the system's private ones are hidden",
    errno.ENETUNREACH: "it has no network", errno.ECONNREFUSED: "it has no network",
    errno.EADDRNOTAVAIL: "it has no network"}


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


def _ours(module) -> bool:
    return isinstance(module, str) and module.partition(".")[0] == "decoderkit"


def watch_decoderkit(roots: list[str]) -> list[str]:
    """Install an audit hook (it cannot be removed) that records the first use of decoderkit
    from now on: one of its modules run (importlib's ``exec`` of its code, whatever copy it
    came from), or a file under ``roots`` (its package folders) opened (by path, under another
    name). An import that found nothing (decoderkit hidden by the sandbox: empty folders) runs
    and opens nothing, so it is not a use. Returns the list it records into."""
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "")
    prefixes = tuple(os.path.join(os.path.abspath(r), "") for r in roots)
    seen = []

    def hook(event, args):
        if seen or event not in ("exec", "open"):
            return
        try:
            if event == "exec" and _module_run(args[0]):
                seen.append(_module_run(args[0]))
            elif event == "open" and not isinstance(args[0], int):
                path = os.path.abspath(os.fsdecode(args[0]))
                if path.startswith(prefixes) and not path.startswith(here) and \
                        os.path.isfile(path):
                    seen.append(path)
        except Exception:  # noqa: BLE001, S110 - a hook that raised would fail the learner's call
            pass

    sys.addaudithook(hook)
    return seen


def _module_run(code) -> str | None:
    """The decoderkit module whose top-level code ``code`` is (importlib registers a module
    in sys.modules, then runs its code with ``exec``), or None."""
    filename = getattr(code, "co_filename", "")
    if getattr(code, "co_name", None) != "<module>" or PACKAGE_PART not in filename:
        return None
    return next((name for name, module in list(sys.modules.items())
                 if _ours(name) and getattr(module, "__file__", None) == filename), None)


def _decoderkit_roots(plan: dict) -> list[str]:
    """decoderkit's package folders: the grader's and the one this interpreter would import."""
    import importlib.util
    try:
        spec = importlib.util.find_spec("decoderkit")
    except (ImportError, ValueError):
        spec = None
    found = list(spec.submodule_search_locations or []) if spec is not None else []
    return [*plan.get("decoderkit", []), *found]


def _from_decoderkit(space, seen) -> list[str]:
    """What the learner's names take from decoderkit ("f from decoderkit.nn.attention"),
    or ["decoderkit"] when the file used it but no name holds it (an import inside a
    function, a module dropped from sys.modules: ``seen``, from ``watch_decoderkit``)."""
    found = []
    for name, value in list(space.items()):
        try:
            module = getattr(value, "__module__", None)
            if isinstance(value, types.ModuleType):  # one with code (not an empty folder's)
                module = value.__name__ if getattr(value, "__file__", None) else None
        except BaseException:  # noqa: B036 - a learner's object may raise anything
            continue
        if _ours(module):
            found.append(f"{name} from {module}")
    if not found and seen:
        found.append("decoderkit")
    return sorted(found)


def _alarm(signum, frame):
    raise TimeoutError("did not return in time (an endless loop?)")


def execute(space, calls, inputs, torch, save, seconds: int = CALL_SECONDS,
            labels=frozenset(), hidden=None) -> None:
    """Run each planned call whose name the learner defines; ``save(id, result)`` each
    (``hidden``: inside the grader's sandbox, the folders it hides; its refusals are named)."""
    signal.signal(signal.SIGALRM, _alarm)
    for call in calls:
        if not defines(space, call["name"]):
            continue
        try:
            signal.alarm(seconds)
            result = run(call, space, inputs, torch)
        except BaseException as err:  # noqa: B036 - SystemExit, KeyboardInterrupt included
            result = {"error": _describe_error(err, space.get("__file__", ""), labels, hidden)}
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
    sources = _sources(plan, learner)
    labels = {name for name, *_ in sources} - {learner}  # notebook cells: "cell 3"
    hidden = plan.get("hidden")  # None: the sandbox is off
    seen = watch_decoderkit(_decoderkit_roots(plan))  # from here on: the learner's code
    status = {"imported": True}
    signal.signal(signal.SIGALRM, _alarm)
    try:
        signal.alarm(2 * seconds)  # the file's own top-level code
        for name, source, data in sources:  # a file, or a notebook's cells in order
            exec(_compiled(name, source, data), space)
    except BaseException as err:  # noqa: B036 - the learner's code may raise anything
        status = {"imported": False,
                  "error": _describe_error(err, learner, labels, hidden)}
    finally:
        signal.alarm(0)
    status["found"] = sorted(n for n in plan["names"] if defines(space, n))
    status["decoderkit"] = _from_decoderkit(space, seen)
    calls = plan["calls"] if status["imported"] else []
    _write_status(workdir, status)  # already known, should a call hang or kill the process

    def save(call_id, result):
        sys.stdout = sys.stderr = captured  # the learner may have replaced them
        torch.save(result, f"{workdir}/result_{call_id}.pt")

    execute(space, calls, inputs, torch, save, seconds, labels, hidden)
    status.update(printed=captured.total, print_head="".join(captured.kept), finished=True,
                  decoderkit=_from_decoderkit(space, seen))
    _write_status(workdir, status)
    real_out.flush()


def _sources(plan: dict, learner: str) -> list[tuple[str, str, bytes]]:
    """(label, text, its bytes) of each piece to run: the plan's (a notebook's cells, what
    ``grade(obj)`` sends), or the learner's file."""
    if plan.get("sources"):
        return [(name, text, text.encode("utf-8", "replace")) for name, text in plan["sources"]]
    with open(learner, "rb") as f:
        data = f.read()
    return [(learner, data.decode("utf-8", "replace"), data)]


def _compiled(name: str, source: str, data: bytes):
    """``source`` compiled as ``name``; a NUL byte (compile names no line for it) is a
    SyntaxError placed at its byte offset in ``data`` (the source's bytes) and its line."""
    at = data.find(b"\0")
    if at >= 0:
        raise SyntaxError(f"the source holds a NUL byte at byte offset {at}",
                          (name, data.count(b"\n", 0, at) + 1, None, None))
    return compile(source, name, "exec")


def _write_status(workdir: str, status: dict) -> None:
    with open(f"{workdir}/status.tmp", "w") as f:
        json.dump(status, f)
    os.replace(f"{workdir}/status.tmp", f"{workdir}/status.json")


def _describe_error(err: BaseException, learner: str, labels=frozenset(),
                    hidden=None) -> str:
    """``Type: message`` plus the learner-file line (or notebook cell and line) it came
    from, when there is one, and (inside the sandbox, which hides ``hidden``) what of the
    sandbox refused it."""
    tb, where = err.__traceback__, ""
    while tb is not None:
        name = tb.tb_frame.f_code.co_filename
        if learner and name == learner or name in labels:
            where = f" ({_place(name, tb.tb_lineno, labels)})"
        tb = tb.tb_next
    if isinstance(err, SyntaxError) and err.lineno is not None and (
            err.filename == learner or err.filename in labels):  # in the learner's source
        return f"{type(err).__name__}: {err.msg} ({_place(err.filename, err.lineno, labels)})"
    text = str(err).splitlines()[0][:300] if str(err).strip() else ""
    return f"{type(err).__name__}{': ' + text if text else ''}{where}" + (
        "" if hidden is None else _sandbox_refusal(err, hidden))


def _sandbox_refusal(err: BaseException, hidden) -> str:
    """'; blocked by the grader's sandbox: it has no network' for an error the sandbox
    causes ('' for any other)."""
    if isinstance(err, ImportError) and _ours(err.name):
        return "; blocked by the grader's sandbox: decoderkit itself is hidden from the code it " \
               "grades"
    if not isinstance(err, OSError):
        return ""
    why = SANDBOX_ERRNOS.get(err.errno)
    if isinstance(err, socket.gaierror):  # a host name: no resolver is reachable
        why = "it has no network"
    elif err.errno == errno.ENOENT and isinstance(err.filename, str):
        path = os.path.abspath(err.filename)
        why = next((f"{folder} is hidden from it (shown empty)" for folder in hidden
                    if path.startswith(os.path.join(folder, ""))), None)
    return f"; blocked by the grader's sandbox: {why}" if why else ""


def _place(name: str, line, labels) -> str:
    """'line 7' in the file, 'cell 3, line 7' in a notebook cell."""
    return f"{name}, line {line}" if name in labels else f"line {line}"
