"""A GGUF file's header, checked before anything in it is trusted: its keys and values and its
tensors' names, types, shapes and places, read by bounds from the memory-mapped file (only the
header's pages are touched), so that a hostile or damaged file costs bounded memory and time
before it is refused in one line naming the field (``FILE: ...``).

The layout (GGUF 2 and 3, little-endian): magic ``GGUF``, version, tensor count, key count; each
key a string and a typed value (``VALUE_TYPES``: scalars, strings, arrays of one scalar or
string type); each tensor its name, dimensions (``ne``, the row length first), ggml type and
offset; then the data, each tensor at its offset from the aligned start of the data section.

Checked here: the magic, the version and byte order; every count against what the bytes left
can hold and against ``LIMITS``; every string's and array's length likewise, before it is read;
value and tensor types known; keys and tensor names unique and UTF-8; ``general.alignment`` a
power of two; each tensor's dimensions (1 to 4, none zero, the row a whole number of its
type's blocks), its offset aligned, its bytes inside the file and overlapping no other's.
gguf's own ``GGUFReader`` is not used for this: it parses every key and tensor into arrays
first (seconds for a Qwen-sized vocabulary), and trusts the counts it reads. The tensors' data
is read and dequantized a block of rows at a time by ``interop.gguf.tensors``.
"""

from __future__ import annotations

import math
import mmap
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from decoderkit.base.errors import UsageError
from decoderkit.base.files import check_input_file
from decoderkit.interop.artifacts import import_extra
from decoderkit.interop.gguf.detect import MAGIC, VERSIONS

# the ggml tensor types decoderkit dequantizes (through gguf.quants.dequantize)
TYPES = ("F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K", "Q4_K",
         "Q5_K", "Q6_K")
# GGUF's value types (gguf.GGUFValueType) -> (numpy dtype, bytes); 8 a string, 9 an array.
# A float32 reads as the shortest decimal that rounds to it (``_plain``).
VALUE_TYPES = {0: ("<u1", 1), 1: ("<i1", 1), 2: ("<u2", 2), 3: ("<i2", 2), 4: ("<u4", 4),
               5: ("<i4", 4), 6: ("<f4", 4), 7: ("<u1", 1), 10: ("<u8", 8), 11: ("<i8", 8),
               12: ("<f8", 8)}
FLOAT32, BOOL, STRING, ARRAY = 6, 7, 8, 9
MAX_DIMS = 4  # ggml's GGML_MAX_DIMS
DEFAULT_ALIGNMENT = 32  # GGUF's, where general.alignment is absent
ALIGNMENT = "general.alignment"


@dataclass(frozen=True)
class Limits:
    """The most a GGUF header may hold: far above any published model, far below harm."""

    keys: int = 1 << 16  # key/value pairs (a model has ~40)
    tensors: int = 1 << 16  # tensors (Llama 3 70B: 723)
    string: int = 1 << 20  # bytes of one string (a chat template: ~30 KB on the Hub)
    array: int = 1 << 22  # items of one array (Gemma 3's 262,144 tokens)
    name: int = 256  # bytes of a key or a tensor name (ggml's tensor names: 64)


LIMITS = Limits()


@dataclass(frozen=True)
class TensorInfo:
    """One tensor of a GGUF file, as its header describes it (checked)."""

    name: str
    kind: str  # its ggml type's name ("Q8_0"), one of TYPES
    shape: tuple[int, ...]  # numpy's order: the row length last (GGUF's ``ne`` reversed)
    offset: int  # where its bytes start in the file
    nbytes: int  # how many bytes it holds


@dataclass(frozen=True)
class Header:
    """A GGUF file's keys and tensors, every one checked."""

    file: Path
    version: int
    fields: dict[str, object]  # key -> int, float, bool, str or a list of one of them
    tensors: dict[str, TensorInfo]  # name -> its description, in the file's order


class _Cursor:
    """Reads GGUF's little-endian values from ``buf`` at ``at``, each within its bounds."""

    def __init__(self, buf, file: Path, limits: Limits):
        self.buf, self.file, self.limits, self.at = buf, file, limits, 0

    def take(self, n: int, what: str) -> int:
        """The offset of the next ``n`` bytes (moved past), if the file holds them."""
        if n > len(self.buf) - self.at:
            raise UsageError(f"{self.file}: {what} needs {n:,} bytes at offset {self.at:,}, "
                             f"past the end of the file ({len(self.buf):,} bytes): truncated "
                             "or damaged")
        self.at += n
        return self.at - n

    def scalar(self, fmt: str, what: str):
        return struct.unpack_from("<" + fmt, self.buf, self.take(struct.calcsize(fmt), what))[0]

    def string(self, what: str, most: int) -> str:
        n = self.scalar("Q", f"{what}'s length")
        if n > most:
            raise UsageError(f"{self.file}: {what} claims {n:,} bytes, more than the "
                             f"{most:,} a GGUF string may hold here")
        start = self.take(n, what)
        try:
            return bytes(self.buf[start:start + n]).decode("utf-8")
        except UnicodeDecodeError:
            raise UsageError(f"{self.file}: {what} is not UTF-8 text") from None

    def value(self, kind: int, key: str, top: bool = True):
        """The value of type ``kind`` of ``key``; an array (at the top level only) whole."""
        if kind == STRING:
            return self.string(f"key {key!r}'s value", self.limits.string)
        if kind in VALUE_TYPES:
            dtype, n = VALUE_TYPES[kind]
            value = np.frombuffer(self.buf, dtype, 1, self.take(n, f"key {key!r}'s value"))[0]
            return _checked_bool(value, key, self.file) if kind == BOOL else _plain(value)
        if kind == ARRAY and top:
            return self.array(key)
        what = "an array of arrays, which GGUF readers do not take" if kind == ARRAY else \
            f"value type {kind}, which GGUF does not define"
        raise UsageError(f"{self.file}: key {key!r} has {what}")

    def array(self, key: str) -> list:
        kind = self.scalar("I", f"key {key!r}'s item type")
        n = self.scalar("Q", f"key {key!r}'s length")
        least = VALUE_TYPES[kind][1] if kind in VALUE_TYPES else 8  # a string: its length
        if n > self.limits.array:
            raise UsageError(f"{self.file}: key {key!r} claims {n:,} items, more than the "
                             f"{self.limits.array:,} a GGUF array may hold here")
        if n * least > len(self.buf) - self.at:
            raise UsageError(f"{self.file}: key {key!r} claims {n:,} items, more than the "
                             f"{len(self.buf) - self.at:,} bytes left in the file hold: "
                             "truncated or damaged")
        if kind in VALUE_TYPES:
            dtype, size = VALUE_TYPES[kind]
            values = np.frombuffer(self.buf, dtype, n, self.take(n * size, f"key {key!r}"))
            if kind in (BOOL, FLOAT32):
                return [_checked_bool(v, key, self.file) if kind == BOOL else _plain(v)
                        for v in values]
            return values.tolist()
        return [self.value(kind, key, top=False) for _ in range(n)]


def _plain(value: np.generic) -> int | float:
    """A scalar as Python's; a float32 as the shortest decimal it rounds from (1e-05, as the
    writer meant it, not 9.99999974737875e-06: the same float32 either way)."""
    return float(str(value)) if value.dtype == np.float32 else value.item()


def _checked_bool(value: np.generic, key: str, file: Path) -> bool:
    if value not in (0, 1):
        raise UsageError(f"{file}: key {key!r} holds {int(value)} as a bool (0 or 1)")
    return bool(value)


def read_header(file: str | Path, limits: Limits = LIMITS) -> Header:
    """The checked header of the GGUF ``file`` (a regular file; see the module docstring)."""
    file = check_input_file(Path(file), "the GGUF file")
    with open(file, "rb") as f:
        if file.stat().st_size < len(MAGIC) + 20:
            raise UsageError(f"{file}: {file.stat().st_size} bytes, too short for a GGUF header")
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            return _parse(_Cursor(buf, file, limits))


def _parse(cur: _Cursor) -> Header:
    """The header at ``cur``'s start: counts, keys, tensor descriptions, all checked."""
    file, limits = cur.file, cur.limits
    start = cur.take(len(MAGIC), "the magic")
    magic = bytes(cur.buf[start:start + len(MAGIC)])
    if magic != MAGIC:
        raise UsageError(f"{file}: starts with {magic!r}, not GGUF's magic {MAGIC!r}")
    version = cur.scalar("I", "the version")
    if version not in VERSIONS:
        order = " (big-endian: a file for another byte order)" if version & 0xFFFF == 0 else ""
        raise UsageError(f"{file}: GGUF version {version}{order}; decoderkit reads versions "
                         f"{', '.join(map(str, VERSIONS))} (little-endian)")
    n_tensors, n_keys = cur.scalar("Q", "the tensor count"), cur.scalar("Q", "the key count")
    left = len(cur.buf) - cur.at
    for what, n, most, least in (("tensor count", n_tensors, limits.tensors, 28),
                                 ("key count", n_keys, limits.keys, 13)):
        if n > most:
            raise UsageError(f"{file}: its {what} is {n:,}, more than the {most:,} read")
        if n * least > left:  # a key takes >= 13 bytes, a tensor's description >= 28
            raise UsageError(f"{file}: its {what} is {n:,}, more than its {left:,} bytes "
                             "can hold: truncated or damaged")
    fields = {}
    for _ in range(n_keys):
        key = cur.string("a key", limits.name)
        if key in fields:
            raise UsageError(f"{file}: key {key!r} appears twice")
        fields[key] = cur.value(cur.scalar("I", f"key {key!r}'s type"), key)
    described = [_tensor_info(cur, fields) for _ in range(n_tensors)]
    alignment = _alignment(fields, file)
    data = -(-cur.at // alignment) * alignment
    tensors = _place(described, data, alignment, len(cur.buf), file)
    return Header(file, version, fields, tensors)


def _alignment(fields: dict, file: Path) -> int:
    value = fields.get(ALIGNMENT, DEFAULT_ALIGNMENT)
    if type(value) is not int or value <= 0 or value & (value - 1) or value > 1 << 20:
        raise UsageError(f"{file}: {ALIGNMENT} must be a power of two up to 2**20, got "
                         f"{value!r}")
    return value


def _tensor_info(cur: _Cursor, fields: dict) -> tuple[str, str, tuple[int, ...], int]:
    """(name, type name, numpy shape, offset in the data) of the next tensor description."""
    file = cur.file
    name = cur.string("a tensor name", cur.limits.name)
    n_dims = cur.scalar("I", f"tensor {name!r}'s dimension count")
    if not 1 <= n_dims <= MAX_DIMS:
        raise UsageError(f"{file}: tensor {name!r} has {n_dims} dimensions (1 to {MAX_DIMS})")
    ne = [cur.scalar("Q", f"tensor {name!r}'s dimensions") for _ in range(n_dims)]
    if min(ne) < 1 or math.prod(ne) > 1 << 40:
        raise UsageError(f"{file}: tensor {name!r} has dimensions {ne}: each must be >= 1, "
                         "at most 2**40 values in all")
    code = cur.scalar("I", f"tensor {name!r}'s type")
    kind = _type_name(code)
    if kind not in TYPES:
        raise UsageError(f"{file}: tensor {name!r} has ggml type {kind}, which decoderkit "
                         f"does not dequantize (it reads {', '.join(TYPES)})")
    block = import_extra("gguf").GGML_QUANT_SIZES[_quant_type(kind)][0]
    if ne[0] % block:
        raise UsageError(f"{file}: tensor {name!r}'s rows of {ne[0]} values are no whole "
                         f"number of {kind}'s blocks of {block}")
    offset = cur.scalar("Q", f"tensor {name!r}'s offset")
    return name, kind, tuple(reversed(ne)), offset


def _place(described: list, data: int, alignment: int, size: int, file: Path
           ) -> dict[str, TensorInfo]:
    """Each tensor placed in the file: its offset aligned, its bytes inside the file, none
    overlapping another, every name once."""
    sizes = import_extra("gguf").GGML_QUANT_SIZES
    tensors: dict[str, TensorInfo] = {}
    for name, kind, shape, offset in described:
        if name in tensors:
            raise UsageError(f"{file}: tensor {name!r} is described twice")
        block, type_size = sizes[_quant_type(kind)]
        nbytes = math.prod(shape) // block * type_size
        if offset % alignment:
            raise UsageError(f"{file}: tensor {name!r}'s offset {offset:,} is not a multiple "
                             f"of the alignment {alignment}")
        if offset + nbytes > size - data:
            raise UsageError(f"{file}: tensor {name!r}'s {nbytes:,} bytes at data offset "
                             f"{offset:,} run past the end of the file (its data section holds "
                             f"{max(size - data, 0):,} bytes): truncated or damaged")
        tensors[name] = TensorInfo(name, kind, shape, data + offset, nbytes)
    ordered = sorted(tensors.values(), key=lambda t: t.offset)
    for before, after in zip(ordered, ordered[1:], strict=False):
        if after.offset < before.offset + before.nbytes:
            raise UsageError(f"{file}: tensors {before.name!r} and {after.name!r} overlap "
                             f"(bytes {after.offset:,} to {before.offset + before.nbytes:,})")
    return tensors


def _type_name(code: int) -> str:
    """The ggml type's name of ``code`` ("Q8_0"), or the number where gguf knows none."""
    types = import_extra("gguf").GGMLQuantizationType
    return types(code).name if code in types._value2member_map_ else str(code)


def _quant_type(kind: str):
    return import_extra("gguf").GGMLQuantizationType[kind]
