"""What every export shares: optional engine packages, atomic output directories and the
record of the files they hold (``decoderkit.json``'s ``files``; an encoder-decoder export's
manifest: ``manifest``). An export is written under a temporary sibling name and renamed into
place.
"""

from __future__ import annotations

import importlib
import json
import stat
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

from decoderkit.base.errors import UsageError
from decoderkit.base import files as base_files
from decoderkit.base.files import (
    TEXT_BYTES,
    describe,
    entries,
    file_sha256,
    foreign_entries,
    write_atomic,
)
from decoderkit.base.text import read_json
from decoderkit.training.checkpoint_dir import existing

MANIFEST = "decoderkit.json"
EXTRA = 'pip install "decoderkit[export]"'  # the optional extra holding every engine package


def import_extra(name: str) -> ModuleType:
    """Import an engine package of the ``export`` extra; missing: a UsageError naming the extra."""
    try:
        return importlib.import_module(name)
    except ImportError as err:
        raise UsageError(f"{name} is not installed ({err}); install the export extra: "
                         f"{EXTRA}") from None


def write_directory(out: str | Path, overwrite: bool, fill: Callable[[Path], object]) -> Path:
    """Call ``fill(tmp)`` on a new temporary directory beside ``out``, record its files in the
    manifest, then swap it in (``base.files.write_directory``, the one atomic writer).

    An existing ``out`` is a UsageError unless ``overwrite``, and with it, unless ``out`` holds
    only the files a previous export wrote (its manifest lists them): nothing of the user's is
    ever deleted. It is replaced only after ``fill`` succeeded; a failed ``fill`` leaves ``out``
    as it was and removes the temporary. A symlink ``out`` is resolved once and keeps pointing
    at its target, which is what gets replaced.
    """
    def check(real: Path) -> None:
        if real.exists():
            if not overwrite:
                raise UsageError(f"{real} exists; pass --overwrite to replace it")
            check_export_replaceable(real)

    def write(tmp: Path) -> None:
        fill(tmp)
        _record_files(tmp)

    return base_files.write_directory(out, "--out", write, check, (".old", "export"))


def _files(directory: Path) -> list[str]:
    """Every regular file below ``directory``, as sorted relative POSIX paths."""
    return sorted(name for name, kind in entries(directory).items() if kind == "file")


def _record_files(directory: Path) -> None:
    """Add the list of the export's files to its manifest (what ``--overwrite`` may replace)
    and the sha256 of each other file (verified on load, as a checkpoint's)."""
    manifest = json.loads((directory / MANIFEST).read_text())
    manifest["files"] = _files(directory)
    manifest["sha256"] = {f: file_sha256(directory / f) for f in manifest["files"]
                          if f != MANIFEST}
    write_atomic(directory / MANIFEST, lambda tmp: tmp.write_text(json.dumps(manifest, indent=2)))


def check_export_replaceable(out: Path) -> None:
    """Refuse to replace ``out`` unless it is a decoderkit export holding only its own files."""
    if not out.is_dir():
        raise UsageError(f"--out {out} exists and is not a directory; refusing to replace it")
    try:
        owned = set(read_json(out / MANIFEST)["files"])
    except (UsageError, KeyError, TypeError):
        raise UsageError(f"--out {out} is not a decoderkit export (no readable {MANIFEST} "
                         "listing its files); refusing to replace it, choose another --out") \
            from None
    foreign = foreign_entries(out, owned)
    if foreign:
        raise UsageError(f"--out {out} holds what the export did not write (its manifest does "
                         f"not list {', '.join(foreign[:5])}{', ...' if len(foreign) > 5 else ''}"
                         "); refusing to delete it with --overwrite")


def exported_for(directory: str | Path) -> str | None:
    """The engine the manifest of ``directory`` names (a cheap look that never raises: what a
    path holds), or None where there is no readable one."""
    file = Path(directory) / MANIFEST
    if describe(file) is not None:  # absent, or not a regular file
        return None
    try:
        manifest = read_json(file)
    except UsageError:
        return None
    engine = manifest.get("engine") if isinstance(manifest, dict) else None
    return engine if isinstance(engine, str) else None


def export_file(directory: str | Path, name: str) -> Path:
    """``directory / name`` if ``name`` (as a manifest lists it) stays inside the export and
    is a regular file there: a relative path without ``..``, reached through no symlink, not a
    symlink, a pipe or a device itself. Checked by name first, then with ``lstat`` only (never
    followed, opened or hashed); else a ``UsageError`` naming it."""
    directory = Path(directory)
    parts = name.split("/")
    if not name or name.startswith("/") or "\0" in name or any(p in ("", ".", "..")
                                                              for p in parts):
        raise UsageError(f"{directory / MANIFEST} lists {name!r}, a name outside the export "
                         "(only relative paths inside it, without '..'); refusing to read it")
    for depth in range(1, len(parts) + 1):
        path = directory.joinpath(*parts[:depth])
        try:
            mode = path.lstat().st_mode
        except FileNotFoundError:
            raise UsageError(f"{path} is missing from the export {directory}") from None
        except OSError as err:
            raise UsageError(f"{path}: cannot be read ({err.strerror or err})") from None
        want, kind = (stat.S_ISREG, "a regular file") if depth == len(parts) else \
            (stat.S_ISDIR, "a directory")
        if not want(mode):
            what = "is a symlink" if stat.S_ISLNK(mode) else describe(path) or f"is not {kind}"
            raise UsageError(f"{path} (listed in {MANIFEST}) {what}; an export holds regular "
                             "files only: refusing to read it")
    return existing(directory / name, TEXT_BYTES if name.endswith(".json") else None)


def engine_file(directory: str | Path, name: str) -> str:
    """The path of an engine's own file in an export (``export_file``: inside it, a regular
    file; its checksum was verified with the manifest), for the engine to open."""
    return str(export_file(directory, name))
