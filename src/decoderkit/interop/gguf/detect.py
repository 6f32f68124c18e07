"""A GGUF file (llama.cpp's format) recognised where a model path is expected, so that the one
opener (``interop.checkpoints.identify``) names it instead of finding no model: a regular file
whose first four bytes are ``GGUF``, or an ``lm export --to gguf`` directory, its architecture
read by the ``gguf`` package's reader where the file and the package allow. decoderkit writes
GGUF but reads no GGUF weights; what runs the file is named instead."""

from __future__ import annotations

from pathlib import Path

from decoderkit.base.files import describe
from decoderkit.interop.artifacts import exported_for
from decoderkit.interop.gguf.writer import ENGINE, FILE

MAGIC = b"GGUF"  # a GGUF file's first bytes
ARCHITECTURE = "general.architecture"  # the key naming llama.cpp's architecture
# what gguf's reader raises on a truncated or damaged file (measured: ValueError, IndexError)
UNREADABLE = (ValueError, IndexError, KeyError, OverflowError, OSError)


def gguf_file(path: str | Path) -> Path | None:
    """The GGUF file at ``path`` (the file itself, or the model.gguf of an export directory),
    or None: a cheap look that never raises, four bytes read from a regular file."""
    path = Path(path)
    if describe(path) == "is a directory" and exported_for(path) == ENGINE:
        path = path / FILE
    if describe(path) is not None:  # absent, a directory, a pipe, a device
        return None
    try:
        with open(path, "rb") as f:
            head = f.read(len(MAGIC))
    except OSError:
        return None
    return path if head == MAGIC else None


def gguf_kind(path: str | Path) -> tuple[str, str] | None:
    """(what the GGUF at ``path`` is, what to use instead), or None where there is none."""
    file = gguf_file(path)
    if file is None:
        return None
    kind = "a GGUF export (decoderkit lm export --to gguf: " if file != Path(path) else \
        "a GGUF file ("
    instead = (f"decoderkit reads no GGUF weights: run it with llama.cpp (`llama-cli -m {file}`)"
               f" or llama-cpp-python (`Llama(model_path='{file}')`), or give decoderkit the "
               "Hugging Face or decoderkit directory it was exported from")
    return f"{kind}llama.cpp's format, {architecture(file)})", instead


def architecture(file: Path) -> str:
    """The architecture of a GGUF ``file`` in words ("architecture 'qwen2'"), by gguf's reader
    (which maps the file, reads its keys and tensor list), or why it is unknown."""
    try:
        import gguf
    except ImportError:
        return "its architecture unread: the gguf package is not installed"
    try:
        field = gguf.GGUFReader(file).fields.get(ARCHITECTURE)
        value = None if field is None else field.contents()
    except UNREADABLE:
        return "its metadata unreadable: truncated or damaged"
    return f"architecture {value!r}" if isinstance(value, str) else \
        f"no {ARCHITECTURE} in its metadata"
