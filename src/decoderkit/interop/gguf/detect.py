"""Where a model path names a GGUF file (llama.cpp's format): the file itself (a regular file
whose first four bytes are ``GGUF``, whatever its name: an Ollama blob is ``sha256-HEX``), a
directory holding one ``.gguf`` file (an ``lm export --to gguf`` directory, a folder LM Studio
or a user keeps a model in), or the name of a model in Ollama's store (``interop.gguf.ollama``:
``smollm2:135m``). ``is_gguf`` is the opener's cheap look; ``gguf_path`` the file, or a refusal
naming what is wrong (a directory of several GGUF files, an Ollama blob that is missing)."""

from __future__ import annotations

import os
from pathlib import Path

from decoderkit.base.errors import UsageError
from decoderkit.base.files import describe
from decoderkit.interop.gguf.ollama import manifest_path, ollama_blob

MAGIC = b"GGUF"  # a GGUF file's first bytes
SUFFIX = ".gguf"
VERSIONS = (2, 3)  # the versions whose counts are 64-bit (llama.cpp's since 2023)
SCAN = 4096  # the most entries of a directory looked at for GGUF files


def is_gguf(path: str | Path) -> bool:
    """True if ``path`` names a GGUF file (the module docstring); a cheap look that never
    raises: four bytes of a regular file, a directory's names, an Ollama manifest's place."""
    path = Path(path)
    kind = describe(path)
    if kind == "is a directory":
        return bool(_gguf_files(path))
    if kind == "does not exist":
        manifest = manifest_path(str(path))
        return manifest is not None and manifest.is_file()
    return kind is None and _head(path, len(MAGIC)) == MAGIC


def gguf_path(path: str | Path) -> Path:
    """The GGUF file ``path`` names (``is_gguf`` true of it), or a refusal naming the problem."""
    path = Path(path)
    kind = describe(path)
    if kind == "is a directory":
        files = _gguf_files(path)
        if len(files) != 1:
            raise UsageError(f"{path} holds {len(files)} GGUF files "
                             f"({', '.join(f.name for f in files[:5])}): give one of them")
        return files[0]
    if kind == "does not exist":
        blob = ollama_blob(str(path))
        if blob is None:
            raise UsageError(f"{path}: no such file, and no model of that name in Ollama's "
                             "store")
        if describe(blob) is not None:
            raise UsageError(f"{path}: Ollama's manifest names the blob {blob}, which "
                             f"{describe(blob)} (pulled only in part, or removed?)")
        return blob
    return path


def _gguf_files(directory: Path) -> list[Path]:
    """The regular ``.gguf`` files (with GGUF's magic) among a directory's first ``SCAN``
    entries, sorted."""
    found = []
    try:
        with os.scandir(directory) as it:
            for _, entry in zip(range(SCAN), it, strict=False):
                path = Path(entry.path)
                if entry.name.endswith(SUFFIX) and describe(path) is None and \
                        _head(path, len(MAGIC)) == MAGIC:
                    found.append(path)
    except OSError:
        return []
    return sorted(found)


def _head(path: Path, n: int) -> bytes | None:
    """The first ``n`` bytes of a regular file (nothing opened that is not one: a pipe would
    block), None where there is none to read."""
    if describe(path) is not None:  # absent, a directory, a pipe, a device
        return None
    try:
        with open(path, "rb") as f:
            return f.read(n)
    except OSError:
        return None
