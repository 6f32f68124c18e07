"""The attention kernels: softmax(Q K^T / sqrt(d_k) + M) V as the reference formula, through
PyTorch's SDPA, for rows sharing keys (beam search), and for rows computed alike whatever their
companions (continuous batching's step).

Legend: B batch, T query length, S key/value length, h heads, d_k head width. Masks are bool,
True = may attend (see ``decoderkit.nn.masks``).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from decoderkit.nn.masks import check_mask

ROWS_CHUNK = 16  # a rowwise step's key window grows in steps of this many positions
SMALL_MATMUL = 400  # PyTorch's CPU bmm: its own loop below this many multiply-adds a matrix


def attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    mask: Tensor | None = None,
    dropout: nn.Module | None = None,
) -> tuple[Tensor, Tensor]:
    """softmax(Q K^T / sqrt(d_k) + M) V, the reference path, returning (output, weights).

    query (..., T, d_k), key (..., S, d_k), value (..., S, d_v), mask broadcastable to
    (..., T, S) with True = may attend. Blocked scores are set to literal -inf, so a
    row with visible keys gives exactly zero weight to the blocked ones. A query row
    with no visible key at all has an undefined softmax; here it returns zero weights
    and a zero output (never NaN). Output (..., T, d_v), weights (..., T, S).
    Blocked values still enter the product weights @ V as 0 x value: a non-finite value
    (NaN, inf) at a blocked key makes the output NaN, here and in SDPA alike (as in
    PyTorch's own attention). Values are finite whenever the model's inputs and weights are;
    a zero weight hides a finite value exactly.
    """
    d_k = query.size(-1)
    scores = (query @ key.transpose(-2, -1)).div_(math.sqrt(d_k))  # (..., T, S), its own
    if mask is not None:
        check_mask(mask, scores.shape)
        scores.masked_fill_(~mask, float("-inf"))
    weights = scores.softmax(dim=-1)
    if mask is not None:  # rows with no visible key: softmax gave NaN -> 0
        weights = weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    if dropout is not None:
        weights = dropout(weights)
    return weights @ value, weights  # (..., T, d_v), (..., T, S)


def attend_heads(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, dropout_p: float,
                 need_weights: bool) -> tuple[Tensor, Tensor | None]:
    """Every head's attention: q (B, h, T, d_k), k and v (B, h_kv, S, d_k) (query head i reads
    key/value head i // (h / h_kv)), mask broadcastable to (B, T, S). The reference
    ``attention()`` when the weights are wanted or a CPU step's few queries (``fused_pays``;
    grouped keys and values repeated for it), otherwise PyTorch's SDPA (same formula, fused).
    Returns
    (output (B, h, T, d_k), weights (B, h, T, S) or None)."""
    if mask is not None:
        check_mask(mask, (q.size(0), q.size(2), k.size(2)))  # (B, T, S)
        mask = mask.unsqueeze(-3) if mask.dim() >= 3 else mask  # broadcast over heads
    grouped = k.size(1) != q.size(1)  # grouped-query: h_kv key/value heads
    if grouped and (need_weights or not fused_pays(q, dropout_p)):
        k, v = (t.repeat_interleave(q.size(1) // t.size(1), dim=1) for t in (k, v))
        grouped = False
    if need_weights:
        return attention(q, k, v, mask, nn.Dropout(dropout_p) if dropout_p > 0 else None)
    if not fused_pays(q, dropout_p):
        return attention(q, k, v, mask)[0], None
    # SDPA returns 0 for a row with no visible key (torch >= 2.5: _safe_softmax)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p,
                                          enable_gqa=grouped), None


FUSED_MIN_QUERIES = 8  # on a CPU, fewer query rows a head than this: the reference path


def fused_pays(q: Tensor, dropout_p: float) -> bool:
    """Whether attention of queries q (..., T, d_k) runs SDPA's fused kernel rather than the
    reference ``attention()``: not on a CPU at fewer than ``FUSED_MIN_QUERIES`` queries (a
    decoding step), where the flash kernel's fixed cost is not amortised. Measured at the Bible
    model's step (4 heads, d_k 32, 2 threads; benchmarks/log/): beam search's
    cross-attention (G T = 4 queries on a source's keys) 2-2.6x faster by the reference, 1.3-1.4x
    with a padding mask up to ~40 keys (even at 80); self-attention at T = 1 about even (0.7x at
    10 keys, 1.1x at 60); the Bible's 400 test verses 10.0 against 11.0 s. Dropout on the
    weights stays with SDPA's fused draw, and a compiled or exported graph with SDPA (its
    compiler fuses it; and no guard on a dynamic T)."""
    return (torch.compiler.is_compiling() or q.device.type != "cpu"
            or q.size(-2) >= FUSED_MIN_QUERIES or dropout_p > 0)


def attend_shared(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, dropout_p: float,
                  need_weights: bool) -> tuple[Tensor, Tensor | None]:
    """``attend_heads`` where G consecutive query rows share one key/value row (beam search: a
    source's G hypotheses read its memory): q (B G, h, T, d_k), k and v (B, h, S, d_k), mask
    (B, 1, S) per source (or broadcastable to it). The G rows' queries are laid side by side, so the
    shared keys/values are read once, not copied G times; the result is row by row the same."""
    if q.size(0) % k.size(0):
        raise ValueError(f"x has {q.size(0)} rows, not a multiple of the {k.size(0)} "
                         f"key/value rows")
    G = q.size(0) // k.size(0)
    q = q.unflatten(0, (-1, G)).transpose(1, 2).flatten(2, 3)  # (B, h, G T, d_k)
    out, weights = attend_heads(q, k, v, mask, dropout_p, need_weights)

    def unfold(t: Tensor) -> Tensor:  # (B, h, G T, e) -> (B G, h, T, e)
        return t.unflatten(2, (G, -1)).transpose(1, 2).flatten(0, 1)

    return unfold(out), None if weights is None else unfold(weights)


def attend_rows(q: Tensor, keys: Tensor, values: Tensor, bias: Tensor) -> Tensor:
    """Rows' one-token attention computed alike whatever their companions (``nn.cache``'s
    rowwise kernel): softmax(q K^T / sqrt(d_k) + M) V in three calls (``baddbmm``: the scale
    as its alpha, the additive mask M its input; the softmax; ``bmm``), whose batched matmuls
    and softmax compute a row alike for any batch size and any window of whole chunks (PyTorch's
    fused CPU SDPA does not). q (n, G h, 1, d_k), keys and values (n, h, S, d_k) (the G query
    heads sharing a key/value head are G query rows of its product), bias (n h, 1, S) ->
    (n, G h, 1, d_k)."""
    n, h, S, d_k = keys.shape
    G = q.size(1) // h
    scores = torch.baddbmm(bias, q.reshape(n * h, G, d_k),
                           keys.view(n * h, S, d_k).transpose(1, 2),
                           alpha=1 / math.sqrt(d_k))  # (n h, G, S)
    return torch.bmm(scores.softmax(dim=-1), values.view(n * h, S, d_k)).view(n, G * h, 1, d_k)


def rows_window(longest: int, capacity: int, d_k: int) -> int:
    """``attend_rows``' key window when the longest row attends ``longest`` positions: whole
    ``ROWS_CHUNK``s, and at least ``SMALL_MATMUL / d_k`` positions (so that every window
    takes BLAS, never PyTorch's own loop for small matrices, which rounds otherwise), at most
    the ``capacity`` (every window equal then)."""
    def chunks(n: float) -> int:
        return -(-math.ceil(n) // ROWS_CHUNK) * ROWS_CHUNK

    return min(capacity, max(chunks(longest), chunks(SMALL_MATMUL / d_k)))


# A rowwise prefill attends in query chunks ending at multiples of this (the prefix store's
# block). 32, not 16: SDPA's CPU flash kernel reads a chunk's keys once a 32-query block, so
# 16-query chunks cost 54 us a query over 1,800 keys, 32-query ones 43 (64: 44); a chat's
# turn 10 (224 positions over 1,904 kept) attended in 254-350 ms, 237 ms at 32
PREFILL_CHUNK = 32


def prefill_chunks(start: int, stop: int) -> list[tuple[int, int]]:
    """Positions start..stop-1 of a rowwise prefill in chunks (a, b) that end at whole multiples
    of ``PREFILL_CHUNK`` (the last at ``stop``): position i's attention is then one call of the
    same shape whether its prompt began at 0 or after a loaded prefix of whole chunks (SDPA
    rounds a query by the call's length), so prefix reuse is exact."""
    edges = [*range(start - start % PREFILL_CHUNK + PREFILL_CHUNK, stop, PREFILL_CHUNK), stop]
    return list(zip([start, *edges[:-1]], edges, strict=True))
