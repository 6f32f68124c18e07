"""The k largest of each row, as beam search ranks a source's K x V extensions every step.

``top_k(x, k)`` gives ``x.topk(k, dim=-1)``'s values; it is faster on long rows because
PyTorch's CPU ``topk`` walks every element of a row one by one (about 1.2 ms a step for 64
sources x 16,004 extensions, beam 4 over 4,001 pieces, one thread), while a row's maxima per
chunk are one vectorised reduction. Measured: benchmarks/log/ (the Bible section).
"""

from __future__ import annotations

import torch
from torch import Tensor

CHUNK = 64  # elements a chunk (32, 64, 128, 256 measured: 64 the fastest at 16,004 a row)
MIN_CHUNKS = 8  # rows of fewer than MIN_CHUNKS * k chunks: topk itself (no gain there)


def top_k(x: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """(values, indices) (B, k) of the k largest of each row of x (B, n), largest first: the
    values of ``x.topk(k, dim=-1)``; where values are equal, which of their indices come back
    may differ (``topk`` promises no order among equal values either).

    The first n - n % CHUNK elements are cut into chunks of ``CHUNK``. The k largest of a row lie
    in the k chunks with the largest maxima, or in the n % CHUNK elements left over: for each j,
    the chunks holding the j largest either are all chosen, or a chosen chunk was not one of them
    and so each of the k chosen ones holds an element at least the j-th largest. So ``topk`` runs
    over those k * CHUNK + n % CHUNK candidates only, after one maximum per chunk.
    """
    B, n = x.shape
    whole = n // CHUNK
    if whole < MIN_CHUNKS * k:
        return x.topk(k, dim=-1)
    body = x[:, :whole * CHUNK].view(B, whole, CHUNK)
    chunks = body.amax(dim=-1).topk(k, dim=-1).indices  # (B, k) chunks holding the k largest
    picked = body.gather(1, chunks[..., None].expand(-1, -1, CHUNK)).view(B, k * CHUNK)
    values, at = torch.cat([picked, x[:, whole * CHUNK:]], dim=1).topk(k, dim=-1)
    in_chunk = chunks.gather(1, (at // CHUNK).clamp_max(k - 1)) * CHUNK + at % CHUNK
    left_over = at - k * CHUNK + whole * CHUNK
    return values, torch.where(at < k * CHUNK, in_chunk, left_over)
