"""A GGUF file (llama.cpp's format) recognised where a model path is expected, so that the one
opener (``interop.checkpoints.identify``) names it instead of finding no model: a regular file
whose first four bytes are ``GGUF``, or an ``lm export --to gguf`` directory. decoderkit writes
GGUF but reads no GGUF weights; what runs the file is named instead.

Its architecture is read from the key/value pairs at the file's start (GGUF 2 and 3,
little-endian: magic, version, tensor and key counts, then each key and typed value), within
its first ``HEAD_BYTES`` and up to the first array value; llama.cpp's converter and gguf's
writer put ``general.architecture`` first. gguf's own reader is not used here: it parses every
key and tensor first, 7.7 s for a Qwen2-sized vocabulary's 151,936 tokens and merges (measured).
"""

from __future__ import annotations

import struct
from pathlib import Path

from decoderkit.base.files import describe
from decoderkit.interop.artifacts import exported_for
from decoderkit.interop.gguf.writer import ENGINE, FILE

MAGIC = b"GGUF"  # a GGUF file's first bytes
HEAD_BYTES = 1 << 16  # the most read of a file's start
ARCHITECTURE = "general.architecture"  # the key naming llama.cpp's architecture
# GGUF's value types (gguf.GGUFValueType): a scalar type -> its bytes; 8 a string, 9 an array
SCALARS = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
STRING = 8
VERSIONS = (2, 3)  # the versions whose counts are 64-bit (llama.cpp's since 2023)


def gguf_file(path: str | Path) -> Path | None:
    """The GGUF file at ``path`` (the file itself, or the model.gguf of an export directory),
    or None: a cheap look that never raises, four bytes read from a regular file."""
    path = Path(path)
    if describe(path) == "is a directory" and exported_for(path) == ENGINE:
        path = path / FILE
    head = _head(path, len(MAGIC))
    return path if head == MAGIC else None


def gguf_kind(path: str | Path) -> tuple[str, str] | None:
    """(what the GGUF at ``path`` is, its architecture named, and what to use instead), or
    None where there is none."""
    file = gguf_file(path)
    if file is None:
        return None
    kind = "a GGUF export (decoderkit lm export --to gguf: " if file != Path(path) else \
        "a GGUF file ("
    arch = architecture(file)
    arch = f"architecture {arch!r}" if arch is not None else \
        f"no {ARCHITECTURE} among its first keys: truncated or damaged"
    instead = (f"decoderkit reads no GGUF weights: run it with llama.cpp (`llama-cli -m {file}`)"
               f" or llama-cpp-python (`Llama(model_path='{file}')`), or give decoderkit the "
               "Hugging Face or decoderkit directory it was exported from")
    return f"{kind}llama.cpp's format, {arch})", instead


def architecture(file: Path) -> str | None:
    """``general.architecture`` of a GGUF ``file`` (see the module docstring), or None where
    it is not among the keys before the first array within ``HEAD_BYTES``."""
    head = _head(file, HEAD_BYTES) or b""
    try:
        version, _, keys = struct.unpack_from("<IQQ", head, len(MAGIC))
        at = len(MAGIC) + 20
        for _ in range(keys if version in VERSIONS else 0):  # each key moves on >= 12 bytes
            key, at = _string(head, at)
            (kind,) = struct.unpack_from("<I", head, at)
            at += 4
            if kind == STRING:
                value, at = _string(head, at)
                if key == ARCHITECTURE:
                    return value
            elif kind in SCALARS:
                at += SCALARS[kind]
            else:  # an array (the tokenizer's lists follow general.*) or no type at all
                return None
    except (struct.error, UnicodeDecodeError):  # past the bytes read, or no text
        return None
    return None


def _string(head: bytes, at: int) -> tuple[str, int]:
    """(the GGUF string at ``at``: a 64-bit length, then UTF-8; the offset past it)."""
    (n,) = struct.unpack_from("<Q", head, at)
    if at + 8 + n > len(head):
        raise struct.error(f"a string of {n} bytes past the {len(head)} read")
    return head[at + 8:at + 8 + n].decode("utf-8"), at + 8 + n


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
