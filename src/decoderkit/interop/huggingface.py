"""What every Hugging Face model directory shares: a ``config.json`` naming its
``model_type``, and the weights in ``model.safetensors``, else sharded as
``model.safetensors.index.json`` and the shards it names (``nn.stored``), else
``pytorch_model.bin`` (read with ``weights_only=True``). Each of ``interop.marian`` and
``interop.gpt.hf`` reads its directories through here; every file is checked to be a regular
file of sane size first, and not a link out of its directory (``base.model_files``).
"""

from __future__ import annotations

import os
from pathlib import Path

from decoderkit.base.errors import UsageError
from decoderkit.base.files import describe
from decoderkit.base.model_files import model_file
from decoderkit.base.text import read_json as read_json_file
from decoderkit.nn.stored import INDEX_SUFFIX
from decoderkit.training.checkpoint_dir import META

CONFIG, SAFETENSORS, BIN = "config.json", "model.safetensors", "pytorch_model.bin"
INDEX = SAFETENSORS + INDEX_SUFFIX  # a sharded model's index: model.safetensors.index.json


def model_type(directory: str | Path) -> str | None:
    """The ``model_type`` of ``directory``'s config.json, or None where there is no readable
    one (a cheap look that never raises: which format a path holds)."""
    file = Path(directory) / CONFIG
    if describe(file) is not None:  # absent, or a pipe that would block
        return None
    try:
        raw = read_json(file)
    except UsageError:
        return None
    return raw.get("model_type") if isinstance(raw, dict) else None


def hf_model_type(directory: str | Path) -> str | None:
    """The ``model_type`` of a Hugging Face directory (a config.json naming one as a string,
    no meta.json: our own run directories hold a config.json too), else None; never raises."""
    if os.path.lexists(Path(directory) / META):
        return None
    kind = model_type(directory)
    return kind if isinstance(kind, str) else None


def config_problem(directory: str | Path) -> str | None:
    """Why ``directory``'s config.json cannot be read as a Hugging Face config: not a regular
    file, not JSON (line and column), no JSON object naming a ``model_type``; None if it can,
    or there is none, or the directory is a decoderkit run (it holds a meta.json)."""
    file = Path(directory) / CONFIG
    if not os.path.lexists(file) or os.path.lexists(Path(directory) / META):
        return None
    try:
        raw = read_json(file)
    except UsageError as err:
        return str(err)
    if not isinstance(raw, dict) or not isinstance(raw.get("model_type"), str):
        return f"{file}: not a Hugging Face config (a JSON object naming its model_type)"
    return None


def read_json(file: Path) -> object:
    """The JSON in ``file``, a file of its model directory (``model_file``: no link out of it;
    ``base.text.read_json``: a regular file of sane size); missing or malformed is one
    ``UsageError`` naming it."""
    file = model_file(file.parent, file.name)
    if not os.path.lexists(file):
        raise UsageError(f"{file} is missing (not a Hugging Face model directory?)")
    return read_json_file(file)


def read_config(directory: str | Path, kinds: tuple[str, ...], what: str) -> tuple[Path, dict]:
    """(the file, its JSON object) of ``directory``'s config.json, whose ``model_type`` must be
    one of ``kinds`` (``what`` they are: "a decoder-only LM"); else refused naming the file."""
    file = Path(directory) / CONFIG
    raw = read_json(file)
    kind = raw.get("model_type") if isinstance(raw, dict) else None
    if kind not in kinds:
        raise UsageError(f"{file}: model_type {kind!r} is not one decoderkit reads as {what} "
                         f"(expected one of {kinds})")
    return file, raw


def weights_file(directory: str | Path) -> Path:
    """``model.safetensors`` in ``directory``, else its sharded index, else
    ``pytorch_model.bin``; none: refused."""
    directory = Path(directory)
    for name in (SAFETENSORS, INDEX, BIN):
        if os.path.lexists(directory / name):
            return model_file(directory, name)
    raise UsageError(f"{directory} has none of {SAFETENSORS}, {INDEX} (sharded) or {BIN}")

