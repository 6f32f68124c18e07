"""Hidden temporary names beside an output, and what a killed process left under them.

Every write goes through a temporary sibling, ``.NAME.decoderkit-<12 hex><suffix>`` (never a
name of the user's), renamed into place when complete. A process killed mid-write leaves it
behind; while a process writes one it holds an ``flock`` on it (``held``), so ``leftovers``
tells the two apart, and ``remove_leftovers`` (called by every save or export over the same
output) removes only those: no other file, no live writer's temporary, and no holder of a
replaced directory while it is the only copy left (a crash between a save's two renames).
"""

from __future__ import annotations

import fcntl
import os
import re
import secrets
import shutil
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

TEMP_PREFIX = ".decoderkit-"  # hidden, unique temporary files and directories start so
RANDOM_HEX = 12  # hex digits of a temporary's random part
PARTIAL_SUFFIXES = ("", ".tmp")  # a directory or a file being written (else: a holder)


def temp_sibling(path: str | Path, suffix: str = ".tmp") -> Path:
    """A hidden name beside ``path`` that does not exist yet (random, so no user file has it)."""
    path = Path(path)
    while True:
        token = secrets.token_hex(RANDOM_HEX // 2)
        candidate = path.with_name(f".{path.name}{TEMP_PREFIX}{token}{suffix}")
        if not candidate.exists():
            return candidate


@contextmanager
def held(path: Path) -> Iterator[None]:
    """Hold an ``flock`` on the temporary ``path`` (a file or a directory) while it is
    written, so that no other process takes it for a leftover."""
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _in_use(path: Path) -> bool:
    """True if a live process holds ``path``'s flock (or it cannot be opened to tell)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def leftovers(final: str | Path) -> list[Path]:
    """The temporaries of ``final`` that a killed write left beside it, sorted: our names
    only (``temp_sibling``'s), no symlink, none that a live process holds (``held``), and a
    holder of a replaced directory only once ``final`` exists again."""
    final = Path(final)
    pattern = re.compile(re.escape(f".{final.name}{TEMP_PREFIX}")
                         + f"[0-9a-f]{{{RANDOM_HEX}}}(.*)")
    try:
        names = sorted(os.listdir(final.parent))
    except OSError:
        return []
    found = []
    for name in names:
        match = pattern.fullmatch(name)
        path = final.parent / name
        if match is None or path.is_symlink():
            continue
        if match.group(1) not in PARTIAL_SUFFIXES and not final.exists():
            continue  # a holder while the new directory is not in place: the only copy
        if not _in_use(path):
            found.append(path)
    return found


def remove_leftovers(final: str | Path) -> list[str]:
    """Remove ``leftovers(final)`` and name them in one note on stderr; their names."""
    removed = []
    for path in leftovers(final):
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()
        removed.append(path.name)
    if removed:
        print(f"note: removed {len(removed)} partial copy(ies) that an interrupted decoderkit "
              f"write left beside {final}: {', '.join(removed)}", file=sys.stderr)
    return removed
