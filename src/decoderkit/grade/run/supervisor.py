"""The small process between the grader and a learner's child: the grader is never the child's
parent, so a file that kills its parent kills this supervisor, not the grading run.

Run as a script (``python -I supervisor.py WORKDIR SECONDS CMD...``; it imports nothing of
decoderkit): it becomes a child subreaper (Linux ``PR_SET_CHILD_SUBREAPER``), so every process
the learner's code starts and orphans (double fork, ``setsid``, ``start_new_session``) is
re-parented here rather than to init; runs CMD in a session of its own, with WORKDIR as its
working directory and its output in ``WORKDIR/stdout.txt``; stops it after SECONDS; then kills
its process group and every descendant left, and writes ``WORKDIR/supervisor.json`` (the
child's exit status, whether it was stopped). Each process of a run carries the run's marker
in its environment (``MARKER``), so the grader can also find what escaped a killed supervisor
(``kill_marked``). ``child.pid`` holds the child's pid as soon as it runs. Inside the grader's
sandbox (``bwrap``) it is the init of the run's PID namespace: no signal from the learner's
code reaches it, and when it exits every process left in the namespace is killed.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
import time

MARKER = "DECODERKIT_GRADE_RUN"  # environment variable naming the run (a random token)
PR_SET_CHILD_SUBREAPER = 36  # <linux/prctl.h>
KILL_ROUNDS_SECONDS = 10.0  # the most time spent killing what a run left (a fork loop)
IGNORED = (signal.SIGINT, signal.SIGHUP, signal.SIGTERM)  # the supervisor outlives these


def marked(pid: int, token: str) -> bool:
    """True if process ``pid`` has ``MARKER=token`` in its environment (False once it is gone,
    a zombie, or not ours to read)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return f"{MARKER}={token}".encode() in f.read().split(b"\0")
    except OSError:
        return False


def _pids() -> list[int]:
    """Every process id (none without /proc, off Linux: the group kill is then all there is)."""
    try:
        return [int(name) for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return []


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, parent pid) of process ``pid``, None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        state, ppid = stat[stat.rindex(b")") + 2:].split()[:2]  # after "pid (comm) "
        return state.decode(), int(ppid)
    except (OSError, ValueError, IndexError):
        return None


def kill_marked(token: str, orphans: bool = False) -> int:
    """SIGKILL every live process carrying the run's ``token`` and, with ``orphans`` (the
    supervisor), every child of this process whatever its environment, reaping them, round
    after round until none is left or ``KILL_ROUNDS_SECONDS`` pass. Returns how many
    processes were signalled. (Without ``orphans`` nothing is reaped: the caller's other
    children are none of this.)"""
    me, killed = os.getpid(), set()
    deadline = time.monotonic() + KILL_ROUNDS_SECONDS
    while time.monotonic() < deadline:
        targets = []
        for pid in _pids():
            stat = _stat(pid)
            if pid != me and stat is not None and stat[0] != "Z" and (
                    (orphans and stat[1] == me) or marked(pid, token)):
                targets.append(pid)
        for pid in targets:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
            except OSError:
                pass
        if orphans:
            _reap()
        if not targets:
            break
        time.sleep(0.01)
    return len(killed)


def _reap() -> None:
    """Collect every exited child of this process (re-parented orphans included)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _become_subreaper() -> None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the marker scan still finds them
        pass


def _default_signals() -> None:
    """preexec_fn: the child starts with default handlers (this process ignores some)."""
    for sig in IGNORED:
        signal.signal(sig, signal.SIG_DFL)


def main(workdir: str, seconds: float, cmd: list[str]) -> None:
    for sig in IGNORED:
        signal.signal(sig, signal.SIG_IGN)  # only the grader ends a run (SIGKILL)
    _become_subreaper()
    token = os.environ[MARKER]
    with open(f"{workdir}/stdout.txt", "wb") as out:
        child = subprocess.Popen(cmd, cwd=workdir, stdin=subprocess.DEVNULL, stdout=out,
                                 stderr=subprocess.STDOUT, start_new_session=True,
                                 preexec_fn=_default_signals)
    with open(f"{workdir}/child.pid", "w") as f:
        f.write(str(child.pid))
    try:
        code, stopped = child.wait(timeout=seconds), False
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()
        code, stopped = None, True
    left = kill_marked(token, orphans=True)  # what it started and left running
    try:
        os.killpg(child.pid, signal.SIGKILL)  # its group, should a member have shed the marker
    except OSError:
        pass
    left += kill_marked(token, orphans=True)  # their orphans
    with open(f"{workdir}/supervisor.tmp", "w") as f:
        json.dump({"code": code, "stopped": stopped, "left_running": left}, f)
    os.replace(f"{workdir}/supervisor.tmp", f"{workdir}/supervisor.json")


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]), sys.argv[3:])
