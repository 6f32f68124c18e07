"""A GGUF file's tensors as the weights pipeline reads them (``nn.stored.StoredTensors``: a
mapping that reads a tensor when it is looked up), each dequantized to float32 by the ``gguf``
package's own ``gguf.quants.dequantize`` (the maintained reader of every ggml type, not our
own bit unpacking) when it is asked for, a block of rows read and dequantized at a time:
the weights pipeline copies a matrix's blocks straight into their place in the model
(``blocks``), so opening holds the model and one block, never a second copy of the model
nor a whole tensor, as stored or as float32. Before anything is read, the header
(``interop.gguf.reader``) is checked whole.

A tensor may be given a change of row order (``reorder``: llama's q and k rows, stored with
each RoPE pair's two rows side by side, back in Hugging Face's rotate-half order)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import torch

from decoderkit.base.errors import UsageError
from decoderkit.interop.artifacts import import_extra
from decoderkit.interop.gguf.reader import Header
from decoderkit.nn.stored import StoredTensors

CHUNK_BYTES = 1 << 18  # stored bytes read and dequantized at once (gguf's numpy code makes a
# few temporaries of the block)


class GGUFTensors(StoredTensors):
    """name -> float32 tensor of a GGUF file whose header is ``header``, read on lookup."""

    def __init__(self, header: Header,
                 reorder: dict[str, Callable[[np.ndarray], np.ndarray]] | None = None):
        super().__init__(dict.fromkeys(header.tensors, header.file),
                         {k: (t.kind, t.shape) for k, t in header.tensors.items()})
        self.info, self.reorder = header.tensors, dict(reorder or {})

    def __getitem__(self, name: str) -> torch.Tensor:
        shape = self.info[name].shape
        values, at = np.empty((int(np.prod(shape[:-1])), shape[-1]), np.float32), 0
        for block in self._rows(name):
            values[at:at + len(block)], at = block, at + len(block)
        values = values.reshape(shape)
        if name in self.reorder:
            values = self.reorder[name](values)
        return torch.from_numpy(values)

    def blocks(self, name: str) -> Iterator[torch.Tensor]:
        """A matrix's rows a block of stored rows at a time, dequantized (the loader copies
        each into its place: one block held, not the tensor); a reordered tensor, or one of
        another rank, whole."""
        if name in self.reorder or len(self.info[name].shape) != 2:
            yield self[name]
            return
        for block in self._rows(name):
            yield torch.from_numpy(block)

    def _rows(self, name: str) -> Iterator[np.ndarray]:
        """Tensor ``name``'s float32 values as (rows, row length) blocks of its stored rows."""
        info, file = self.info[name], self.where[name]
        try:
            with open(file, "rb") as f:
                f.seek(info.offset)
                yield from dequantized(f, info.kind, info.shape, info.nbytes)
        except OSError as err:
            raise UsageError(f"{file}: cannot read tensor {name!r} ({err})") from None
        except EOFError as err:
            raise UsageError(f"{file}: tensor {name!r} ends after {err} of its "
                             f"{info.nbytes:,} bytes: the file changed since its header was read"
                             ) from None


def dequantized(f, kind: str, shape: tuple[int, ...], nbytes: int) -> Iterator[np.ndarray]:
    """The float32 values of the tensor of ggml type ``kind`` and numpy ``shape`` whose
    ``nbytes`` bytes ``f`` reads next, as (rows, row length) arrays of consecutive stored rows
    (a row: the last dimension), each about ``CHUNK_BYTES`` stored, read and dequantized by
    ``gguf.quants.dequantize`` (EOFError: the bytes read where the file ended)."""
    gguf = import_extra("gguf")
    qtype = gguf.GGMLQuantizationType[kind]
    rows = int(np.prod(shape[:-1]))
    row_bytes = nbytes // rows
    step = max(1, CHUNK_BYTES // row_bytes)
    for start in range(0, rows, step):
        n = min(step, rows - start)
        raw = np.empty((n, row_bytes), np.uint8)
        got = f.readinto(memoryview(raw).cast("B"))
        if got != raw.nbytes:
            raise EOFError(f"{start * row_bytes + got:,}")
        yield gguf.quants.dequantize(raw, qtype).reshape(n, shape[-1])
