"""Self-attention keys and values of rows of different lengths decoded together (continuous
batching), one shared buffer per group of rows, attended at once with each row's arithmetic
independent of its companions.

Legend: B rows in a step, h key/value heads (G h query heads: grouped-query attention), L
positions per slot, S the step's key window, d_k a head's width.
"""

from __future__ import annotations

import math
import mmap

import torch
from torch import Tensor

from decoderkit.nn.attention import KVCache, attend_heads
from decoderkit.nn.masks import causal_mask

ROWS_CHUNK = 16  # a rows step's key window grows in steps of this many positions (see below)
SMALL_MATMUL = 400  # PyTorch's CPU bmm: its own loop below this many multiply-adds a matrix
PAGE = mmap.PAGESIZE  # bytes: the unit in which buffers become resident
ROWS_GROUP = 16  # rows per shared buffer of a RowsKVCache (one attention call each)


def page_aligned(shape: tuple[int, ...], dtype: torch.dtype,
                 device: torch.device | str) -> Tensor:
    """``torch.empty(shape)`` starting at a page boundary on the CPU (the allocator aligns to
    64 bytes): a slot's head of L positions, a whole number of pages, then fills exactly the
    pages its filled positions need, not one more."""
    n, size = math.prod(shape), torch.empty((), dtype=dtype).element_size()
    flat = torch.empty(n + PAGE // size, dtype=dtype, device=device)
    skip = (-flat.data_ptr() % PAGE) // size if flat.device.type == "cpu" else 0
    return flat[skip:skip + n].view(shape)


class RowsKVCache:
    """One layer's self-attention keys and values of rows of different lengths decoded
    together (continuous batching): slot i of a shared buffer holds row i's positions
    0..lengths[i]-1; slots come in groups of ``ROWS_GROUP``, each group one (ROWS_GROUP, h, L, d_k)
    ``KVCache`` buffer, reserved when first needed (its pages become resident as rows fill
    them). ``begin(plan(lengths, window))`` prepares a step of the first B slots; ``update``
    then writes each row's new position and ``attend`` computes softmax(q K^T / sqrt(d_k) + M) V
    per group over the first ``window`` positions in three calls (``baddbmm``: the scale as
    its alpha, the mask M as its additive input, -inf at each row's unfilled positions; the
    softmax; ``bmm``).

    A row's result is the same bit for bit whatever its companions: the window
    (``step_window``) is a multiple of ``ROWS_CHUNK`` positions, and the batched matmuls and
    softmax compute a row alike for any batch size and any such window, the masked positions
    adding exact zeros (measured on the CPU kernels: tests/nn/test_rows_cache.py; PyTorch's
    fused CPU SDPA is not row-invariant this way, so it is not used here). Unfilled positions
    are kept finite (zeroed before a window first covers them): 0 x value stays 0.
    """

    static = False

    def __init__(self, n_heads: int, capacity: int, d_k: int, *, dtype: torch.dtype,
                 device: torch.device | str):
        self.shape, self.dtype, self.device = (n_heads, capacity, d_k), dtype, device
        self.groups: list[KVCache] = []
        self.at: Tensor | None = None  # the step's new positions (``plan``)
        self.bias: Tensor | None = None  # the step's additive mask (``plan``)

    def step_window(self, longest: int) -> int:
        """The key window of a step whose longest row attends ``longest`` positions: whole
        ``ROWS_CHUNK``s, and at least ``SMALL_MATMUL / d_k`` positions (so that every window
        takes BLAS, never PyTorch's own loop for small matrices, which rounds otherwise), at
        most the capacity (every window equal then)."""
        def chunks(n: float) -> int:
            return -(-math.ceil(n) // ROWS_CHUNK) * ROWS_CHUNK

        n_heads, capacity, d_k = self.shape
        return min(capacity, max(chunks(longest), chunks(SMALL_MATMUL / d_k)))

    def slot(self, i: int, capacity: int) -> KVCache:
        """Slot i's first ``capacity`` positions as a batch-1 ``KVCache`` (a view: a prefill
        writes the row's positions in place), its group reserved if need be."""
        while len(self.groups) * ROWS_GROUP <= i:
            shape = (ROWS_GROUP, *self.shape)
            self.groups.append(KVCache.over(*(page_aligned(shape, self.dtype, self.device)
                                              for _ in range(2))))
        g, j = divmod(i, ROWS_GROUP)
        keys, values = self.groups[g].keys, self.groups[g].values
        return KVCache.over(keys[j:j + 1, :, :capacity], values[j:j + 1, :, :capacity])

    def zero(self, i: int, begin: int, end: int) -> None:
        """Zero slot i's positions begin..end-1 (never filled yet: made finite)."""
        g, j = divmod(i, ROWS_GROUP)
        for t in (self.groups[g].keys, self.groups[g].values):
            t[j, :, begin:end] = 0

    def move(self, src: int, dst: int, length: int) -> None:
        """Copy slot src's first ``length`` positions into slot dst."""
        (gs, js), (gd, jd) = divmod(src, ROWS_GROUP), divmod(dst, ROWS_GROUP)
        for name in ("keys", "values"):
            getattr(self.groups[gd], name)[jd, :, :length] = \
                getattr(self.groups[gs], name)[js, :, :length]

    def plan(self, lengths: Tensor, window: int) -> tuple[Tensor, Tensor]:
        """A step of slots 0..B-1, lengths (B,) long, over keys 0..window-1 (the same for every
        layer): each row's new position, lengths itself, and the additive mask of each row's
        and head's scores, (B h, 1, window): 0 at its visible keys 0..lengths[i], -inf past
        them."""
        h = self.shape[0]
        keys = torch.arange(window, device=lengths.device)
        hidden = (keys[None, :] > lengths[:, None]).repeat_interleave(h, dim=0)  # (B h, S)
        bias = torch.zeros(hidden.shape, dtype=self.dtype, device=lengths.device)
        return lengths, bias.masked_fill_(hidden, float("-inf"))[:, None, :]

    def begin(self, plan: tuple[Tensor, Tensor]) -> None:
        """The next step is ``plan``'s: ``at`` (B,) and ``bias`` (B h, 1, S), the tensors
        whose sizes a compiled step marks as varying (``generation.lm.compiled``)."""
        self.at, self.bias = plan

    def _spans(self, B: int):
        """(rows, group) of each group the first B rows fill; counted by groups, not rows, so
        that the compiler keeps B a symbol (guarding the group count, not B itself)."""
        for g in range(-(-B // ROWS_GROUP)):
            yield slice(g * ROWS_GROUP, min(B, (g + 1) * ROWS_GROUP)), self.groups[g]

    def update(self, k: Tensor, v: Tensor) -> None:
        """Append k, v (B, h, 1, d_k): row i's new position at lengths[i] of slot i (an
        indexed assignment, which the compiler keeps in place: a copy of the flattened buffer
        it would not, and copied the whole buffer every step)."""
        for rows, group in self._spans(k.size(0)):
            slot = torch.arange(rows.stop - rows.start, device=k.device)  # (n,)
            group.keys[slot, :, self.at[rows]] = k[rows, :, 0]
            group.values[slot, :, self.at[rows]] = v[rows, :, 0]

    def attend(self, q: Tensor) -> Tensor:
        """q (B, G h, 1, d_k) over each row's positions 0..lengths[i] -> (B, G h, 1, d_k):
        the G query heads that share a key/value head (grouped-query) as G query rows of its
        product (G = 1 without)."""
        (h, _, d_k), S, out = self.shape, self.bias.size(-1), []
        G = q.size(1) // h
        for rows, group in self._spans(q.size(0)):
            n = rows.stop - rows.start
            keys = group.keys[:n, :, :S].view(n * h, S, d_k)  # views: (n h, S, d_k)
            values = group.values[:n, :, :S].view(n * h, S, d_k)
            scores = torch.baddbmm(self.bias[rows.start * h:rows.stop * h],
                                   q[rows].reshape(n * h, G, d_k), keys.transpose(1, 2),
                                   alpha=1 / math.sqrt(d_k))  # (n h, G, S)
            out.append(torch.bmm(scores.softmax(dim=-1), values).view(n, G * h, 1, d_k))
        return torch.cat(out) if len(out) > 1 else out[0]


class PackedKV:
    """One layer's self-attention in a packed prefill (``PackedPrefill``): q, k, v
    (1, h, sum L, d_k) of several prompts end to end; each prompt's keys and values go to its
    own growing ``KVCache`` and its queries attend them under a causal mask, the same
    ``attend_heads`` call as the prompt prefilled alone."""

    static = False

    def __init__(self, caches: list[KVCache], spans: list[tuple[int, int]]):
        self.caches, self.spans = caches, spans
        self._kv: list[tuple[Tensor, Tensor]] = []

    def update(self, k: Tensor, v: Tensor) -> None:
        self._kv = [cache.update(k[:, :, s:e], v[:, :, s:e])
                    for cache, (s, e) in zip(self.caches, self.spans, strict=True)]

    def attend(self, q: Tensor) -> Tensor:
        """q (1, h, sum L, d_k) -> (1, h, sum L, d_k), each prompt over its own positions."""
        out = [attend_heads(q[:, :, s:e], k, v, causal_mask(e - s, device=q.device)
                            if e - s > 1 else None, 0.0, False)[0]
               for (k, v), (s, e) in zip(self._kv, self.spans, strict=True)]
        return torch.cat(out, dim=2) if len(out) > 1 else out[0]


class PackedPrefill:
    """Several rows' prompts prefilled by one forward of ids (1, sum L), end to end: the
    linears, norms and activations see every position as a row of its own (``rowwise``
    linears compute it alike whatever the row count), attention stays within each prompt
    (``PackedKV``), positions count from 0 in each. ``caches[r][l]``: row r's layer-l cache
    (empty, growing); ``lengths``: each prompt's length."""

    def __init__(self, caches: list[list[KVCache]], lengths: list[int]):
        ends = torch.tensor(lengths).cumsum(0).tolist()
        self.spans = [(e - n, e) for n, e in zip(lengths, ends, strict=True)]
        self.layers = [PackedKV([row[layer] for row in caches], self.spans)
                       for layer in range(len(caches[0]))]

    def prepare(self, ids: Tensor) -> tuple[Tensor, None]:
        """ids (1, sum L) -> (positions (1, sum L) long: each prompt's 0..L-1; no mask: each
        layer's ``PackedKV`` masks within each prompt)."""
        if ids.shape != (1, self.spans[-1][1]):
            raise ValueError(f"a PackedPrefill of {self.spans[-1][1]} positions takes ids "
                             f"(1, {self.spans[-1][1]}), got {tuple(ids.shape)}")
        ids = [torch.arange(e - s, device=ids.device) for s, e in self.spans]
        return torch.cat(ids)[None], None
