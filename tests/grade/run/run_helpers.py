"""Learner files that start processes, and the checks that none outlived grading (shared by
the supervisor's and the sandbox's tests)."""

from __future__ import annotations

import os
import secrets
import time
from pathlib import Path

NUMPY_PE = '''
def numpy_pe(pos, d):
    import numpy as np
    angle = np.asarray(pos, float)[:, None] * 10000.0 ** (-np.arange(0, d, 2) / d)
    return np.stack([np.sin(angle), np.cos(angle)], -1).reshape(len(pos), d)
'''


def hostile_file(path: Path, body: str) -> str:
    """Write a learner file: ``body`` after a header defining SLEEP, a Python process that
    sleeps 10 minutes with a fresh token in its command line (so the test finds it whatever
    its parent, session or environment); returns the token."""
    token = secrets.token_hex(8)
    path.write_text("import os, signal, subprocess, sys\n"
                    f"SLEEP = [sys.executable, '-c', 'import time; time.sleep(600)', {token!r}]\n"
                    + body)
    return token


def running(token: str) -> list[int]:
    """Live processes (not zombies) whose command line holds ``token``."""
    found = []
    for pid in (int(p) for p in os.listdir("/proc") if p.isdigit()):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if token.encode() in f.read().split(b"\0"):
                    found.append(pid)
        except OSError:
            pass
    return found


def assert_none_left(token: str, seconds: float = 30.0) -> None:
    """Poll (a loaded machine may take a moment to tear a killed process down)."""
    deadline = time.monotonic() + seconds
    while running(token) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert running(token) == [], f"processes of the graded file outlived grading: {token}"
