"""Atomic file writes: a file is written under a temporary sibling name, then renamed, so a
crash never leaves a half-written file at the real path.

The temporary name is hidden and unique (``.NAME.decoderkit-<random>.tmp``), so it can never
be a file of the user's (``NAME.tmp`` is left alone); it is removed if the write fails. Also the
sha256 of a file, read in blocks (checkpoint checksums, the corpus record).
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Callable
from pathlib import Path

TEMP_PREFIX = ".decoderkit-"  # hidden, unique temporary files and directories start so


def temp_sibling(path: str | Path, suffix: str = ".tmp") -> Path:
    """A hidden name beside ``path`` that does not exist yet (random, so no user file has it)."""
    path = Path(path)
    while True:
        candidate = path.with_name(f".{path.name}{TEMP_PREFIX}{secrets.token_hex(6)}{suffix}")
        if not candidate.exists():
            return candidate


def write_atomic(path: str | Path, write: Callable[[Path], object]) -> Path:
    """Call ``write(tmp)`` on a new temporary sibling of ``path``, then rename it to ``path``."""
    path = Path(path)
    tmp = temp_sibling(path)
    try:
        write(tmp)
        tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)  # ours: made by write() just now
        raise
    return path


def file_sha256(path: str | Path) -> str:
    """Hex sha256 of a file's bytes, read in blocks."""
    digest = hashlib.sha256()
    with Path(path).open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
