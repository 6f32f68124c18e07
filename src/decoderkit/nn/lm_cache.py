"""The decoder-only LM's key/value caches, built from sizes (``CacheShape``), not from a model:
``LMCache`` (a batch decoded together, rows possibly left-padded) and ``RowsCache`` (rows of
different lengths decoded together: continuous batching). Each one turns the ids of a forward
into their explicit positions and mask (``prepare``), which the model then gives to its
position embedding and to every attention layer (RoPE rotates by them): nothing downstream
reads a cache's length back.

Legend: B batch, T new positions, P cached positions, h_kv key/value heads, d_k head width.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from decoderkit.base.errors import UsageError
from decoderkit.nn.attention import KVCache
from decoderkit.nn.masks import causal_mask
from decoderkit.nn.rows_cache import ROWS_CHUNK, RowsKVCache


@dataclass(frozen=True)
class CacheShape:
    """What an LM's caches hold: one key/value cache per block of h_kv heads of d_k each."""

    n_layers: int  # blocks: one cache each
    n_kv_heads: int  # h_kv: the key/value heads a block caches (fewer than its query heads: GQA)
    head_dim: int  # d_k
    context: int  # C: the most positions a row may hold (the model's max_len)


def fresh_positions(ids: Tensor) -> tuple[Tensor, Tensor | None]:
    """ids (B, T) of a forward without a cache: positions (1, T) 0..T-1, the causal (T, T)
    mask (None for one position)."""
    T = ids.size(-1)
    mask = causal_mask(T, device=ids.device) if T > 1 else None
    return torch.arange(T, device=ids.device)[None], mask


class LMCache:
    """One growing self-attention ``KVCache`` per block, and the rows' left padding.

    ``start`` (B,) long: how many positions at the front of each row are padding (batched
    prompts of different lengths, left-padded); None when no row is padded.
    """

    def __init__(self, shape: CacheShape, batch: int, max_len: int, dtype: torch.dtype,
                 device: torch.device | str, start: Tensor | None = None):
        self.layers = [KVCache(batch, shape.n_kv_heads, max_len, shape.head_dim, dtype=dtype,
                               device=device) for _ in range(shape.n_layers)]
        self.start = start

    @classmethod
    def over(cls, layers: list[KVCache]) -> LMCache:
        """An unpadded cache over given per-block ``KVCache``s (e.g. a ``RowsCache`` slot)."""
        cache = cls.__new__(cls)
        cache.layers, cache.start = layers, None
        return cache

    @property
    def length(self) -> int:
        """P: positions cached so far (padding included)."""
        return self.layers[0].length

    @property
    def capacity(self) -> int:
        """Positions the cache can hold."""
        return self.layers[0].capacity

    def prepare(self, ids: Tensor) -> tuple[Tensor, Tensor | None]:
        """ids (B, T), the positions after the P cached ones -> (positions (B or 1, T) long,
        mask (T, P + T) or (B, T, P + T) or None). A left-padded row's positions count from 0
        at its first real token; its padding is never seen (refused past the capacity)."""
        P, T = self.length, ids.size(-1)
        if P + T > self.capacity:
            raise UsageError(f"{P + T} positions exceed the cache's {self.capacity}")
        keys = torch.arange(P + T, device=ids.device)  # (P + T,)
        mask = causal_mask(P + T, device=ids.device)[P:] if T > 1 else None  # (T, P + T)
        if self.start is None:
            return keys[None, P:], mask
        real = keys[None, None, :] >= self.start[:, None, None]  # (B, 1, P + T)
        mask = real if mask is None else real & mask  # (B, T, P + T)
        return (keys[None, P:] - self.start[:, None]).clamp_min(0), mask  # (B, T)


class RowsCache:
    """The caches of rows decoded together though of different lengths (continuous
    batching): one ``RowsKVCache`` per block, slot i of each holding row i's keys and values
    (``lengths[i]`` positions, at most the context C). A row is prefilled into its slot
    (``slot``: a batch-1 ``LMCache`` over it); a step feeds one token to each of slots
    0..B-1 at its next position and attends all B at once; the caller keeps running rows in
    the first slots (``move`` fills a slot a row left from another).
    """

    def __init__(self, shape: CacheShape, dtype: torch.dtype, device: torch.device | str):
        self.context = shape.context
        capacity = -(-shape.context // ROWS_CHUNK) * ROWS_CHUNK  # every window fits
        self.layers = [RowsKVCache(shape.n_kv_heads, capacity, shape.head_dim, dtype=dtype,
                                   device=device) for _ in range(shape.n_layers)]
        self.lengths: list[int] = []  # per slot: positions filled
        self._finite: list[int] = []  # per slot: positions 0.. known finite (filled or zeroed)

    def empty(self, i: int) -> None:
        """Slot i holds no positions (a row that joined and waits for its prefill)."""
        while len(self.lengths) <= i:
            self.lengths.append(0)
            self._finite.append(0)
        self.lengths[i] = 0

    def slot(self, i: int) -> LMCache:
        """An empty batch-1 ``LMCache`` of C positions over slot i, for its row's prefill;
        ``filled(i, cache)`` records what it wrote."""
        self.empty(i)
        return LMCache.over([layer.slot(i, self.context) for layer in self.layers])

    def filled(self, i: int, cache: LMCache) -> None:
        """Slot i now holds the ``cache.length`` positions its ``slot`` cache was given."""
        self.lengths[i] = cache.length
        self._finite[i] = max(self._finite[i], cache.length)

    def move(self, src: int, dst: int) -> None:
        """Slot src's row into slot dst (its filled positions copied)."""
        for layer in self.layers:
            layer.move(src, dst, self.lengths[src])
        self.lengths[dst] = self.lengths[src]
        self._finite[dst] = max(self._finite[dst], self.lengths[src])

    def prepare(self, ids: Tensor) -> tuple[Tensor, None]:
        """A step of slots 0..B-1, ids (B, 1): (positions (B, 1) long, each row's next one,
        refused at the context, which the step then fills; no mask: each row's layer
        ``RowsKVCache`` masks its own keys)."""
        B = ids.size(0)
        if ids.dim() != 2 or ids.size(-1) != 1 or not 1 <= B <= len(self.lengths):
            raise UsageError(f"a RowsCache step takes ids (B, 1), B at most its "
                             f"{len(self.lengths)} slots, got {tuple(ids.shape)}")
        lengths = self.lengths[:B]
        for i, n in enumerate(lengths):
            if n >= self.context:
                raise UsageError(f"row {i}: its cache of {self.context} positions is full")
        window = self.layers[0].step_window(max(lengths) + 1)
        for i in range(B):
            if self._finite[i] < window:
                for layer in self.layers:
                    layer.zero(i, self._finite[i], window)
                self._finite[i] = window
        at = torch.tensor(lengths, device=ids.device)  # (B,)
        plan = self.layers[0].plan(at, window)
        for layer in self.layers:
            layer.begin(plan)
        self.lengths[:B] = [n + 1 for n in lengths]
        return at[:, None], None
