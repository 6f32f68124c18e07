"""What every export shares: optional engine packages, the manifest, atomic output directories.

An exported directory holds the engine's own files plus ``decoderkit.json`` (the manifest: the
engine, the weight type and our ``ModelConfig``) and the two tokenizers, so it translates text
without the checkpoint. It is written under a temporary sibling name and renamed into place.
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

from decoderkit.base.errors import UsageError
from decoderkit.base.files import (
    resolve_output_dir,
    swap_in_directory,
    temp_sibling,
    write_atomic,
)
from decoderkit.nn.model import ModelConfig
from decoderkit.training.checkpoint import SRC_TOKENIZER, TGT_TOKENIZER, Checkpoint
from decoderkit.training.prepare import relocated_data
from decoderkit.training.tokenizer import Tokenizer

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
    """Call ``fill(tmp)`` on a new temporary directory beside ``out``, then rename it to ``out``.

    An existing ``out`` is a UsageError unless ``overwrite``, and with it, unless ``out`` holds
    only the files a previous export wrote (its manifest lists them): nothing of the user's is
    ever deleted. It is replaced only after ``fill`` succeeded; a failed ``fill`` leaves ``out``
    as it was and removes the temporary. A symlink ``out`` is resolved once and keeps pointing
    at its target, which is what gets replaced.
    """
    out = resolve_output_dir(out, "--out", replaced=True)
    if out.exists():
        if not overwrite:
            raise UsageError(f"{out} exists; pass --overwrite to replace it")
        check_replaceable(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_sibling(out, suffix="")
    tmp.mkdir()
    try:
        fill(tmp)
        _record_files(tmp)
        swap_in_directory(tmp, out, ".old", "export")
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)  # ours, made above (gone once swapped in)
        raise
    return out


def _entries(directory: Path) -> dict[str, str]:
    """Everything below ``directory`` (symlinks not followed), relative POSIX path -> 'file',
    'directory' or 'other' (a symlink, a pipe, ...)."""
    found = {}
    for root, dirs, files in os.walk(directory):
        for name in dirs + files:
            path = Path(root) / name
            kind = ("other" if path.is_symlink() else "directory" if path.is_dir()
                    else "file" if path.is_file() else "other")
            found[path.relative_to(directory).as_posix()] = kind
    return found


def _files(directory: Path) -> list[str]:
    """Every regular file below ``directory``, as sorted relative POSIX paths."""
    return sorted(name for name, kind in _entries(directory).items() if kind == "file")


def _record_files(directory: Path) -> None:
    """Add the list of the export's files to its manifest (what ``--overwrite`` may replace)."""
    manifest = json.loads((directory / MANIFEST).read_text())
    manifest["files"] = _files(directory)
    write_atomic(directory / MANIFEST, lambda tmp: tmp.write_text(json.dumps(manifest, indent=2)))


def check_replaceable(out: Path) -> None:
    """Refuse to replace ``out`` unless it is a decoderkit export holding only its own files."""
    if not out.is_dir():
        raise UsageError(f"--out {out} exists and is not a directory; refusing to replace it")
    try:
        owned = set(json.loads((out / MANIFEST).read_text())["files"])
    except (OSError, ValueError, KeyError, TypeError):
        raise UsageError(f"--out {out} is not a decoderkit export (no readable {MANIFEST} "
                         "listing its files); refusing to replace it, choose another --out") \
            from None
    folders = {parent.as_posix() for f in owned for parent in Path(f).parents} - {"."}
    foreign = sorted(name for name, kind in _entries(out).items()
                     if not (kind == "file" and name in owned
                             or kind == "directory" and name in folders))
    if foreign:
        raise UsageError(f"--out {out} holds what the export did not write (its manifest does "
                         f"not list {', '.join(foreign[:5])}{', ...' if len(foreign) > 5 else ''}"
                         "); refusing to delete it with --overwrite")


def write_manifest(directory: Path, engine: str, weights: str, ckpt: Checkpoint) -> None:
    """The manifest and both tokenizers, into an export directory being written. The manifest
    keeps the checkpoint's data settings, so ``eval`` finds the same held-out pairs."""
    manifest = {"engine": engine, "weights": weights, "config": ckpt.config.to_dict(),
                **relocated_data(ckpt.meta, ckpt.path, directory), "step": ckpt.step}
    write_atomic(directory / MANIFEST, lambda tmp: tmp.write_text(json.dumps(manifest, indent=2)))
    ckpt.src_tokenizer.save(directory / SRC_TOKENIZER)
    ckpt.tgt_tokenizer.save(directory / TGT_TOKENIZER)


def read_manifest(directory: str | Path, engine: str) -> tuple[dict, ModelConfig, Tokenizer,
                                                                Tokenizer]:
    """(manifest, config, source tokenizer, target tokenizer) of an export made for ``engine``."""
    directory = Path(directory)
    file = directory / MANIFEST
    if not file.is_file():
        raise UsageError(f"{directory} is not a decoderkit export (no {MANIFEST}); make one "
                         f"with decoderkit export --to {engine}")
    try:
        manifest = json.loads(file.read_text())
    except json.JSONDecodeError as err:
        raise UsageError(f"{file}: not valid JSON ({err})") from None
    if manifest.get("engine") != engine:
        raise UsageError(f"{directory} was exported for {manifest.get('engine')!r}, "
                         f"not for --engine {engine}")
    config = ModelConfig.from_dict(manifest["config"])
    return (manifest, config, Tokenizer.load(directory / SRC_TOKENIZER),
            Tokenizer.load(directory / TGT_TOKENIZER))
