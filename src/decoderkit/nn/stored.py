"""Weights read where they lie: safetensors files, one or sharded, a tensor at a time.

A safetensors file opens as ``StoredTensors``, a mapping that reads a tensor only when it is
asked for (from the memory-mapped file, ``safetensors.safe_open``), or a block of its rows at a
time (``blocks``), so that loading copies one block at a time into the model: a model needs its
own size in memory and one block more, not a second copy of any weight. Its header (names,
dtypes, shapes) is read when it opens.

A sharded model is an index, ``model.safetensors.index.json`` (Hugging Face's
``save_pretrained(max_shard_size=...)``): ``{"weight_map": {tensor: shard file}}``. Before any
tensor is read, every shard must be a file name in the index's own directory (no path, no
``..``: nothing outside it), an existing regular file (symlinks followed, as every file of a
model directory: a Hugging Face cache snapshot is links into its ``blobs``), all of them
together at most the bytes a model of the config can hold; each tensor of the index must be in
the shard it names, and each tensor of a shard named by the index, in that shard: every
tensor is in exactly one shard. A name holding a NUL byte, or too long for the OS, is refused
like any other name that is not a file's. Each refusal is one ``UsageError`` naming the file.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from pathlib import Path

import torch
from safetensors import safe_open

from decoderkit.base.errors import UsageError
from decoderkit.base.files import TEXT_BYTES, check_input_file
from decoderkit.base.model_files import model_file
from decoderkit.base.text import read_json

INDEX_SUFFIX = ".index.json"  # model.safetensors.index.json: a sharded model's index
DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16,
          "BF16": torch.bfloat16}  # safetensors' floating-point dtype names (others: not weights)
BLOCK_BYTES = 1 << 20  # the bytes of a tensor read at once while it is copied into a model


class StoredTensors(Mapping[str, torch.Tensor]):
    """name -> tensor of one or more safetensors files, each read when it is looked up."""

    def __init__(self, where: dict[str, Path], header: dict[str, tuple[str, tuple[int, ...]]]):
        self.where = where  # tensor name -> the file holding it
        self.header = header  # tensor name -> (safetensors dtype name, shape)

    def __getitem__(self, name: str) -> torch.Tensor:
        file = self.where[name]
        try:
            with safe_open(str(file), framework="pt") as f:
                return f.get_tensor(name)
        except Exception as err:  # the file changed or was damaged since its header was read
            raise UsageError(f"{file}: cannot read tensor {name!r} ({first_line(err)})"
                             ) from None

    def blocks(self, name: str) -> Iterator[torch.Tensor]:
        """Tensor ``name`` as consecutive blocks of its rows (its first dimension), each of
        about ``BLOCK_BYTES``, each read (``get_slice``) with the file mapped only while it is:
        the loader's copy into the model holds a block, not the tensor (a 0-d one: whole)."""
        file, (kind, shape) = self.where[name], self.header[name]
        rows = shape[0] if shape else 1
        step = block_rows(shape, DTYPES.get(kind, torch.float64).itemsize)
        for start in range(0, rows, step):
            try:
                with safe_open(str(file), framework="pt") as f:
                    block = f.get_slice(name)[start:start + step] if shape else \
                        f.get_tensor(name)
            except Exception as err:  # the file changed or was damaged since
                raise UsageError(f"{file}: cannot read tensor {name!r} ({first_line(err)})"
                                 ) from None
            yield block

    def __iter__(self) -> Iterator[str]:
        return iter(self.where)

    def __len__(self) -> int:
        return len(self.where)

    def dtype(self, name: str) -> torch.dtype | None:
        """The floating-point dtype ``name`` is stored in, from the header (None: not one)."""
        return DTYPES.get(self.header[name][0])

    def numbers(self) -> int:
        """How many numbers the files hold, by their headers."""
        return sum(math.prod(shape) for _, shape in self.header.values())


def block_rows(shape: tuple[int, ...], itemsize: int) -> int:
    """How many rows (the first dimension) of a tensor of ``shape`` make a block of about
    ``BLOCK_BYTES`` at ``itemsize`` bytes a number (at least one)."""
    row = math.prod(shape[1:]) * itemsize
    return max(1, BLOCK_BYTES // max(row, 1))


def is_index(file: Path) -> bool:
    """True if ``file`` is a sharded model's index (by its name)."""
    return file.name.endswith(INDEX_SUFFIX)


def open_stored(file: Path, max_bytes: int | None) -> StoredTensors:
    """The tensors of the safetensors ``file``, or of the shards the index ``file`` names
    (checked as the module docstring says, at most ``max_bytes`` in all), headers read."""
    if not is_index(file):
        check_input_file(file, "the weights file", max_bytes)
        return StoredTensors(*_header(file))
    shards = read_index(file)
    total = 0
    for shard in sorted(set(shards.values())):
        total += check_input_file(shard, f"{file}: shard", max_bytes).stat().st_size
        if max_bytes is not None and total > max_bytes:
            raise UsageError(f"{file}: its shards hold more than the {max_bytes} bytes a model "
                             "of the config can have: damaged or not the right files")
    where, header = {}, {}
    for shard in sorted(set(shards.values())):
        names, found = _header(shard)
        for name in names:
            if shards.get(name) != shard:
                named = "names no shard" if name not in shards else \
                    f"names shard {shards[name].name!r}"
                raise UsageError(f"{file}: tensor {name!r} is in {shard.name}, but the index "
                                 f"{named} for it")
        where |= names
        header |= found
    missing = sorted(set(shards) - set(where))
    if missing:
        raise UsageError(f"{file}: tensor {missing[0]!r} is not in {shards[missing[0]].name}, "
                         "the shard the index names for it")
    return StoredTensors(where, header)


def read_index(file: Path) -> dict[str, Path]:
    """tensor name -> shard path of the index ``file``; a malformed index, or a shard name
    that is not a file name in the index's directory, is refused naming it."""
    raw = read_json(file, "the weights index", TEXT_BYTES)
    weight_map = raw.get("weight_map") if isinstance(raw, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        raise UsageError(f"{file}: not a weights index (a JSON object with a non-empty "
                         "\"weight_map\": tensor name -> shard file)")
    shards = {}
    for name, shard in weight_map.items():
        if not isinstance(shard, str) or Path(shard).name != shard or shard in ("", ".", "..") \
                or "\x00" in shard:
            raise UsageError(f"{file}: tensor {name!r} names the shard {shard!r}, which is not "
                             "a file name in the index's own directory")
        try:
            shards[name] = model_file(file.parent, shard)  # no link out of the directory
        except UsageError as err:
            raise UsageError(f"{file}: shard {err}") from None
    return shards


def _header(file: Path) -> tuple[dict[str, Path], dict[str, tuple[str, tuple[int, ...]]]]:
    """(name -> ``file``, name -> (dtype name, shape)) of a safetensors file's header."""
    try:
        with safe_open(str(file), framework="pt") as f:
            header = {k: (f.get_slice(k).get_dtype(), tuple(f.get_slice(k).get_shape()))
                      for k in f.keys()}
    except Exception as err:  # the reader raises many kinds on a damaged or foreign file
        raise UsageError(f"{file}: truncated or not a safetensors file ({first_line(err)})"
                         ) from None
    return dict.fromkeys(header, file), header


def first_line(err: BaseException) -> str:
    """An error's first line (its type's name where it says nothing), for a one-line refusal."""
    return str(err).splitlines()[0] if str(err) else type(err).__name__
