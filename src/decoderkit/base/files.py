"""Atomic file writes: a file is written under a temporary sibling name, then renamed, so a
crash never leaves a half-written file at the real path."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path


def write_atomic(path: str | Path, write: Callable[[Path], object]) -> Path:
    """Call ``write(tmp)`` on a temporary sibling of ``path``, then rename it to ``path``."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    write(tmp)
    tmp.replace(path)
    return path
