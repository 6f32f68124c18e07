"""Atomic file writes: a file is written under a temporary sibling name, then renamed, so a
crash never leaves a half-written file at the real path.

The temporary name is hidden and unique (``.NAME.decoderkit-<random>.tmp``), so it can never
be a file of the user's (``NAME.tmp`` is left alone); it is removed if the write fails. Also the
sha256 of a file, read in blocks (checkpoint checksums, the corpus record).
"""

from __future__ import annotations

import hashlib
import secrets
import shutil
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


def swap_in_directory(new: Path, final: Path, holder_suffix: str, content: str) -> None:
    """Rename the directory ``new`` to ``final``. A previous ``final`` waits meanwhile as
    ``content`` inside a hidden holder (``temp_sibling(final, holder_suffix)``), is put back if
    the rename fails, and is removed once ``new`` is in place."""
    if not final.exists():
        new.rename(final)
        return
    holder = temp_sibling(final, suffix=holder_suffix)
    holder.mkdir()
    final.rename(holder / content)
    try:
        new.rename(final)
    except BaseException:
        (holder / content).rename(final)  # put the previous one back
        holder.rmdir()
        raise
    shutil.rmtree(holder)  # ours: made above, holds only the replaced directory
