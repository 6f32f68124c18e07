"""The verified, atomic checkpoint directory every checkpoint format is written as.

A format names the files it owns (weights ``model.safetensors``, ``meta.json``, an optional
``trainer.pt``, and its own config and tokenizer files) and writes its own files; this module
does the rest. A save writes a complete directory under a new hidden name beside ``DIR``
(``.DIR.decoderkit-<random>``), records the sha256 of every file in ``meta.json`` and swaps it
in with two renames, so a crash never leaves a half-written checkpoint: if it strikes between
the renames, the previous complete checkpoint is in ``.DIR.decoderkit-<random>-previous/
checkpoint`` and is found and used. A save never replaces a directory holding anything but
the format's files, nor a regular file. Loading verifies the checksums, so damaged bytes are
an error naming the file; directories written before checksums existed load unverified.
Before any file is read it must be a regular file of a sane size (``existing``: a pipe or a
device would block, a huge meta.json fill the memory), and the weights must be exactly the
tensors of the model the config describes, floating point and finite (``load_weights``: the
one pipeline of ``nn.weights`` every format goes through).
"""

from __future__ import annotations

import glob
import json
import os
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

from decoderkit.base.errors import UsageError
from decoderkit.base import files as base_files
from decoderkit.base.files import (
    TEMP_PREFIX,
    TEXT_BYTES,
    check_input_file,
    file_sha256,
    foreign_entries,
    resolve_output_dir,
)
from decoderkit.base.text import read_json
from decoderkit.nn.weights import HEADER_BYTES, identity_map, load_file

WEIGHTS, META, TRAINER = "model.safetensors", "meta.json", "trainer.pt"
ADAPTER_WEIGHTS = "adapter_model.safetensors"  # an adapter's run (PEFT's name): its weights
MARKS = (WEIGHTS, ADAPTER_WEIGHTS)  # the weights that mark a complete checkpoint directory
PREVIOUS = "-previous"  # suffix of the hidden directory holding the replaced checkpoint
CONTENT = "checkpoint"  # the replaced checkpoint's name inside that holder


def write_directory(directory: str | Path, files: tuple[str, ...],
                    write: Callable[[Path], object], *, step: int, meta: dict | None,
                    trainer_state: dict | None) -> Path:
    """Write a complete checkpoint to ``directory`` through ``base.files.write_directory``:
    ``write(tmp)`` puts the format's own files into the new directory, then the trainer state,
    the checksums and ``meta.json``; swapped in atomically. Refuses a file, or a directory
    holding anything but ``files``. A write that fails (a full disk: torch raises
    ``RuntimeError`` there, not ``OSError``) is a ``UsageError`` naming the directory; the
    previous checkpoint is then untouched."""
    final = resolve_output_dir(directory, "checkpoint directory", replaced=True)

    def fill(tmp: Path) -> None:
        try:
            write(tmp)
            if trainer_state is not None:
                torch.save(trainer_state, tmp / TRAINER)
            sums = {p.name: file_sha256(p) for p in sorted(tmp.iterdir())}
            (tmp / META).write_text(json.dumps({"step": step, **(meta or {}), "sha256": sums},
                                               indent=2))
        except Exception as err:  # a full disk, a quota, an I/O error
            kept = (f"the previous checkpoint in {final} is intact" if has_checkpoint(final)
                    else "nothing was saved")
            full = base_files.out_of_space(err, final.parent)
            if full is not None:
                raise UsageError(f"{full}; {kept}") from None
            if not isinstance(err, (OSError, RuntimeError)):
                raise
            raise UsageError(f"cannot write a checkpoint into {final.parent} ({err}); "
                             f"{kept}") from None

    return base_files.write_directory(final, "checkpoint directory", fill,
                                   lambda real: check_replaceable(real, files),
                                   (PREVIOUS, CONTENT))


def check_replaceable(directory: str | Path, files: tuple[str, ...]) -> None:
    """A save may replace ``directory`` only if it is absent, empty or holds ``files`` (the
    format's) alone (``base.files.foreign_entries``); otherwise ``UsageError`` naming what is
    there."""
    path = Path(directory)
    if path.exists() and not path.is_dir():
        raise UsageError(f"{path} is a file, not a checkpoint directory")
    if path.is_dir():
        foreign = foreign_entries(path, files)
        if foreign:
            shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more"
                                              if len(foreign) > 5 else "")
            raise UsageError(f"{path} holds files that are not part of a decoderkit checkpoint "
                             f"({shown}); refusing to replace them: move them or choose "
                             "another directory")


def has_checkpoint(directory: str | Path) -> bool:
    """True if ``directory`` (or the previous one left by a crash mid-swap) holds a checkpoint."""
    return resolve(Path(directory)) is not None


def open_directory(directory: str | Path, files: tuple[str, ...]) -> tuple[Path, dict]:
    """(the complete checkpoint directory, its meta) with every file of ``files`` but the meta
    and the trainer state verified against its checksum."""
    path = resolve(Path(directory))
    if path is None:
        raise UsageError(f"no checkpoint in {directory} (expected {directory}/{WEIGHTS})")
    meta = read_meta(path)
    verify(path, meta, [f for f in files if f not in (META, TRAINER)])
    return path, meta


def read_config(file: Path, config_type: type):
    """``config_type`` (a ``base.config.JsonConfig``) read from its JSON ``file``, checked by
    ``existing`` first; bad JSON or an unknown, missing or invalid field is one error naming
    the file."""
    data = read_json(existing(file))  # not JSON: named with its line and column
    try:
        return config_type.from_dict(data)
    except (ValueError, TypeError) as err:  # unknown/missing/invalid field
        raise UsageError(f"{file}: {err}") from None


def read_trainer_state(path: Path, meta: dict) -> dict | None:
    """The optimiser/scheduler/RNG state saved in ``path`` for resuming (verified), or None."""
    file = path / TRAINER
    if not os.path.lexists(file):
        return None
    weights = existing(path / _mark(path), None).stat().st_size
    existing(file, 4 * weights + HEADER_BYTES)  # Adam's two moments per weight, and the rest
    verify(path, meta, [TRAINER])
    try:
        state = torch.load(file, map_location="cpu", weights_only=True)
    except Exception as err:  # truncated or foreign pickle
        raise UsageError(f"{file}: unreadable trainer state ({err})") from None
    if not isinstance(state, dict):
        raise UsageError(f"{file}: not a trainer state (a {type(state).__name__}, not a dict)")
    return state


def read_meta(path: Path) -> dict:
    """``meta.json`` of the checkpoint in ``path``: a JSON object with an int ``step`` (and, since
    0.2, a ``sha256`` object of file name -> hex digest); anything else is a ``UsageError``."""
    file = existing(path / META)
    meta = read_json(file)
    if not isinstance(meta, dict):
        raise UsageError(f"{file}: expected a JSON object, got {type(meta).__name__}")
    meta.setdefault("step", 0)
    if not isinstance(meta["step"], int) or isinstance(meta["step"], bool) or meta["step"] < 0:
        raise UsageError(f"{file}: 'step' must be an int >= 0, got {meta['step']!r}")
    sums = meta.get("sha256", {})
    if not isinstance(sums, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                             for k, v in sums.items()):
        raise UsageError(f"{file}: 'sha256' must map file names to hex digests")
    return meta


def verify(path: Path, meta: dict, names: list[str], record: str = META) -> None:
    """Each of ``names`` must still have the checksum ``meta`` (the JSON of ``path/record``:
    a checkpoint's meta.json, an export's manifest) records under ``"sha256"``. A directory
    saved with checksums must record one for each file it holds; one saved before: unverified.
    """
    if "sha256" not in meta:
        return
    sums = meta["sha256"]
    if not isinstance(sums, dict) or not all(isinstance(v, str) for v in sums.values()):
        raise UsageError(f"{path / record}: 'sha256' must map file names to hex digests")
    for name in names:
        file = path / name
        if not os.path.lexists(file):
            continue  # a required file missing is named by whoever reads it
        if name not in sums:
            raise UsageError(f"{path / record} records no checksum for {name} (the file was "
                             f"added or {record} edited after it was saved)")
        limit = TEXT_BYTES if name.endswith(".json") else None  # weights: checked on reading
        if file_sha256(existing(file, limit)) != sums[name]:
            raise UsageError(f"{file}: checksum mismatch (the file was damaged or "
                             "changed after it was saved)")


def load_weights(path: Path, config, make: Callable[..., nn.Module]) -> nn.Module:
    """``make(config)`` holding the checkpoint's ``model.safetensors``, through the weights
    pipeline every format uses (``nn.weights.load_file``: the config's claim checked against
    the file before the model is built; then exactly the tensors of the model config.json
    describes (tied weights stored once), with its shapes, floating point and finite)."""
    return load_file(config, make, path / WEIGHTS, identity_map, "config.json")


def existing(file: Path, max_bytes: int | None = TEXT_BYTES) -> Path:
    """``file`` if it is a regular file of at most ``max_bytes``, else a ``UsageError``
    naming it: missing (from the checkpoint or export), or what it is instead (a directory, a
    pipe ...)."""
    if not os.path.lexists(file):
        raise UsageError(f"{file} is missing from {file.parent}")
    return check_input_file(file, "the file", max_bytes)


def resolve(path: Path) -> Path | None:
    """The complete checkpoint directory: ``path`` itself, else the previous checkpoint that a
    crash between the two renames of a save left in its hidden holder (the newest one).
    Complete: holding a model's or an adapter's weights (``MARKS``)."""
    if any((path / mark).exists() for mark in MARKS):
        return path
    found = sorted((p for mark in MARKS for p in path.parent.glob(
        f".{glob.escape(path.name)}{TEMP_PREFIX}*{PREVIOUS}/{CONTENT}/{mark}")),
        key=lambda p: p.stat().st_mtime)
    return found[-1].parent if found else None


def _mark(path: Path) -> str:
    """The weights file of the complete checkpoint directory ``path``."""
    return next((mark for mark in MARKS if (path / mark).exists()), WEIGHTS)
