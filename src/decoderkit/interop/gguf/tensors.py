"""A GGUF file's tensors as the weights pipeline reads them (``nn.stored.StoredTensors``: a
mapping that reads a tensor when it is looked up), each dequantized to float32 by the ``gguf``
package's own ``gguf.quants.dequantize`` (the maintained reader of every ggml type, not our
own bit unpacking) when it is asked for, a block of rows read and dequantized at a time into
its float32 array: the model's memory and one tensor's float32 while opening, never a second
copy of the model nor a whole tensor as stored. Before anything is read, the header
(``interop.gguf.reader``) is checked whole.

A tensor may be given a change of row order (``reorder``: llama's q and k rows, stored with
each RoPE pair's two rows side by side, back in Hugging Face's rotate-half order)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from decoderkit.base.errors import UsageError
from decoderkit.interop.artifacts import import_extra
from decoderkit.interop.gguf.reader import Header
from decoderkit.nn.stored import StoredTensors

CHUNK_BYTES = 1 << 22  # stored bytes read and dequantized at once (gguf's numpy code makes a
# few temporaries of the block)


class GGUFTensors(StoredTensors):
    """name -> float32 tensor of a GGUF file whose header is ``header``, read on lookup."""

    def __init__(self, header: Header,
                 reorder: dict[str, Callable[[np.ndarray], np.ndarray]] | None = None):
        super().__init__(dict.fromkeys(header.tensors, header.file),
                         {k: (t.kind, t.shape) for k, t in header.tensors.items()})
        self.info, self.reorder = header.tensors, dict(reorder or {})

    def __getitem__(self, name: str) -> torch.Tensor:
        info, file = self.info[name], self.where[name]
        try:
            with open(file, "rb") as f:
                f.seek(info.offset)
                values = dequantized(f, info.kind, info.shape, info.nbytes)
        except OSError as err:
            raise UsageError(f"{file}: cannot read tensor {name!r} ({err})") from None
        except EOFError as err:
            raise UsageError(f"{file}: tensor {name!r} ends after {err} of its "
                             f"{info.nbytes:,} bytes: the file changed since its header was read"
                             ) from None
        if name in self.reorder:
            values = self.reorder[name](values)
        return torch.from_numpy(values)


def dequantized(f, kind: str, shape: tuple[int, ...], nbytes: int) -> np.ndarray:
    """The float32 values of the tensor of ggml type ``kind`` and numpy ``shape`` whose
    ``nbytes`` bytes ``f`` reads next: a block of rows read and dequantized by
    ``gguf.quants.dequantize`` at a time, into the one float32 array (EOFError: the bytes read
    where the file ended)."""
    gguf = import_extra("gguf")
    qtype = gguf.GGMLQuantizationType[kind]
    rows = int(np.prod(shape[:-1]))
    row_bytes = nbytes // rows
    out = np.empty((rows, shape[-1]), np.float32)
    step = max(1, CHUNK_BYTES // row_bytes)
    for start in range(0, rows, step):
        n = min(step, rows - start)
        raw = np.empty((n, row_bytes), np.uint8)
        got = f.readinto(memoryview(raw).cast("B"))
        if got != raw.nbytes:
            raise EOFError(f"{start * row_bytes + got:,}")
        out[start:start + n] = gguf.quants.dequantize(raw, qtype)
    return out.reshape(shape)
