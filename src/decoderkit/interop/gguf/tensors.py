"""A GGUF file's tensors as the weights pipeline reads them (``nn.stored.StoredTensors``: a
mapping that reads a tensor when it is looked up), each dequantized to float32 by the ``gguf``
package's own ``gguf.quants.dequantize`` (the maintained reader of every ggml type, not our
own bit unpacking) when it is asked for, a block of rows at a time into its float32 array: the
model's memory and one tensor's (float32 and as stored) while opening, never a second copy of
the model. Before anything is read, the header (``interop.gguf.reader``) is checked whole.

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

CHUNK_VALUES = 1 << 20  # values dequantized at once (gguf's numpy code makes a few temporaries)


class GGUFTensors(StoredTensors):
    """name -> float32 tensor of a GGUF file whose header is ``header``, read on lookup."""

    def __init__(self, header: Header,
                 reorder: dict[str, Callable[[np.ndarray], np.ndarray]] | None = None):
        super().__init__(dict.fromkeys(header.tensors, header.file),
                         {k: (t.kind, t.shape) for k, t in header.tensors.items()})
        self.info, self.reorder = header.tensors, dict(reorder or {})

    def __getitem__(self, name: str) -> torch.Tensor:
        info, file = self.info[name], self.where[name]
        raw = np.empty(info.nbytes, np.uint8)
        try:
            with open(file, "rb") as f:
                f.seek(info.offset)
                got = f.readinto(memoryview(raw))
        except OSError as err:
            raise UsageError(f"{file}: cannot read tensor {name!r} ({err})") from None
        if got != info.nbytes:
            raise UsageError(f"{file}: tensor {name!r} ends after {got:,} of its "
                             f"{info.nbytes:,} bytes: the file changed since its header was read")
        values = dequantized(raw, info.kind, info.shape)
        if name in self.reorder:
            values = self.reorder[name](values)
        return torch.from_numpy(values)


def dequantized(raw: np.ndarray, kind: str, shape: tuple[int, ...]) -> np.ndarray:
    """The float32 values of ``raw``, a tensor of ggml type ``kind`` and numpy ``shape``,
    dequantized by ``gguf.quants.dequantize`` in blocks of rows (F32: the bytes themselves)."""
    gguf = import_extra("gguf")
    qtype = gguf.GGMLQuantizationType[kind]
    if kind == "F32":
        return gguf.quants.dequantize(raw, qtype).reshape(shape)
    rows = int(np.prod(shape[:-1]))
    packed = raw.reshape(rows, -1)
    out = np.empty((rows, shape[-1]), np.float32)
    step = max(1, CHUNK_VALUES // shape[-1])
    for start in range(0, rows, step):
        out[start:start + step] = gguf.quants.dequantize(packed[start:start + step], qtype)
    return out.reshape(shape)
