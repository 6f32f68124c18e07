"""The key/value cache of every decoder, written at the caller's positions (gpt-fast's
``setup_caches`` / ``input_pos``).

``KVCache``: every layer's self-attention keys and values, buffers (N, slots, h, L, d_k)
allocated once from sizes. A forward's caller says where its tokens go (``at``: rows 0..B-1 at
given positions; ``packed``: prompts end to end); each layer writes its keys and values there
by indexed assignment and attends under the mask derived from the positions. The kernel is
chosen when the cache is built: the standard one (``attend_heads`` over each row's first S
positions) or ``rowwise``, a row's result the same bit for bit whatever its companions (a step
by ``attend_rows`` over a window of whole ``ROWS_CHUNK``s; a prefill each prompt by its own
calls, in chunks ending at multiples of ``PREFILL_CHUNK``). Unfilled positions a window covers
are zeroed first (0 x value stays 0). A row can start from keys and values made elsewhere
(``load_prefix``: prefix reuse, exact from whole chunks). ``CrossKV``: cross-attention's static
pair; ``DecoderCache``: both of a decoder.

Legend: N layers, B rows of a forward, T new positions, h key/value heads (G h query heads),
L capacity, S key window, d_k head width.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from decoderkit.base.errors import UsageError
from decoderkit.base.memory import page_aligned
from decoderkit.base.moved import forward
from decoderkit.nn.attend import (ROWS_CHUNK, attend_heads, attend_rows,
                                  prefill_chunks, rows_window)
from decoderkit.nn.masks import to_additive, visible

ROWS_GROUP = 16  # slots per buffer of a rowwise cache


def put(buffer: Tensor | list[Tensor], layer: int, slots: Tensor, index: Tensor, new: Tensor
        ) -> None:
    """Write ``new`` (slots' and index's broadcast shape, h, d_k) into ``buffer`` (N, slots,
    h, L, d_k) at (layer, slot, :, position), in place. Every index a tensor: one indexed
    assignment on the whole buffer, which the compiler keeps in place; through the layer's view
    (``buffer[layer][slots, :, index] = new``) its functional form scattered the view back
    (select_scatter) and copied the whole cache every step (78-98 ms a step against eager's 12
    at 2,048 positions, growing with the capacity). ``over``'s list of N per-layer tensors is
    written in its layer's own tensor."""
    if isinstance(buffer, list):  # ``over``'s: a tensor a layer, written directly
        buffer[layer][slots, :, index] = new
        return
    buffer[torch.tensor([layer], device=buffer.device), slots, :, index] = new  # not 0-d: an int


@dataclass(frozen=True)
class At:
    """Where a forward's T new tokens go in a ``KVCache``, what they see (``at``, ``packed``)."""

    positions: Tensor  # (B or 1, T) long: each token's position in its row (< 0: padding)
    index: Tensor  # (B or 1, T) long: the buffer position each token is written at
    window: int  # S: keys 0..S-1 of each row are attended
    mask: Tensor | None  # (B or 1, T, S) bool, True = may attend; None: every key visible
    bias: Tensor | None = None  # rowwise step: the mask's additive form (B h, 1, S), 0 / -inf
    spans: tuple[tuple[int, int, int], ...] = ()  # packed: (slot, first token, end) a prompt
    chunks: tuple[tuple[tuple[int, int, Tensor | None], ...], ...] = ()  # packed: each
    # span's query chunks (positions a..b-1, their mask (1, b - a, b); None: one query)


class KVCache:
    """Self-attention keys and values of N layers for ``slots`` rows of ``capacity`` positions.
    ``rowwise``: the row-invariant kernel, slots without limit (in groups of ``ROWS_GROUP``, a
    buffer each, reserved when first used, resident as rows fill its pages); otherwise the
    standard kernel on ``slots`` rows, one position more each (scratch: where a padding
    token's keys go, never seen)."""

    def __init__(self, layers: int, kv_heads: int, capacity: int, head_dim: int, *,
                 slots: int = 1, rowwise: bool = False, dtype: torch.dtype,
                 device: torch.device | str):
        capacity = -(-capacity // ROWS_CHUNK) * ROWS_CHUNK if rowwise else capacity  # fits
        self.kv_heads, self.capacity, self.head_dim = kv_heads, capacity, head_dim
        self.dtype, self.device, self.rowwise = dtype, device, rowwise
        self.group = ROWS_GROUP if rowwise else slots
        self.layers = layers
        self.keys: list[Tensor] = []  # per group of slots: (N, group, h, L (+ 1), d_k) (over:
        # N tensors (group, h, L + 1, d_k), indexed by layer alike)
        self.values: list[Tensor] = []
        self.finite: list[int] = []  # per slot: positions 0.. known finite (filled or zeroed)
        self.attend = self._rowwise if rowwise else self._standard  # the kernel, chosen here
        self.reserve(slots - 1)
        self._spare: tuple[Tensor, Tensor] | None = None  # reorder's target

    @classmethod
    def over(cls, keys: list[Tensor], values: list[Tensor]) -> KVCache:
        """A standard cache over an exported graph's buffers, one (B, h, L + 1, d_k) a layer:
        each layer's own tensor, so a step's write is one ScatterND into it (slices of one
        stacked (N, ...) buffer exported as a ScatterElements of the whole layer back into
        the stack, every layer: ONNX Runtime's seq2seq decoding ran 0.28-0.48x as fast)."""
        first = keys[0]
        cache = cls(len(keys), first.size(1), first.size(2) - 1, first.size(3), slots=0,
                    dtype=first.dtype, device=first.device)
        cache.keys, cache.values, cache.group = [keys], [values], first.size(0)
        return cache  # (no slots of its own: ``at`` is the caller's, not this cache's)

    @property
    def slots(self) -> int:  # reserved so far
        return len(self.finite)

    def reserve(self, slot: int) -> None:
        """Make slots 0..slot exist (a rowwise cache reserves whole groups)."""
        if slot >= self.slots and not self.rowwise and self.slots:
            raise UsageError(f"slot {slot} is past this cache's {self.slots} rows")
        room = self.capacity + (0 if self.rowwise else 1)  # standard: the scratch position
        shape = (self.layers, self.group, self.kv_heads, room, self.head_dim)
        while self.slots <= slot:
            self.keys.append(page_aligned(shape, self.dtype, self.device))
            self.values.append(page_aligned(shape, self.dtype, self.device))
            self.finite += [0] * self.group

    def _make_finite(self, slots: range | list[int], window: int) -> None:
        """Zero the never-filled positions below ``window`` (rounded up to whole chunks) of
        ``slots``: a window covering them multiplies them by zero weights."""
        end = min(self.capacity, -(-window // ROWS_CHUNK) * ROWS_CHUNK)
        low = [s for s in slots if self.finite[s] < window]
        if not low:
            return
        if not self.rowwise and len(low) == self.slots and len(set(self.finite)) == 1:
            for t in (self.keys[0], self.values[0]):  # every row at once
                t[:, :, :, self.finite[0]:end] = 0
        else:
            for s in low:
                g, j = divmod(s, self.group)
                for t in (self.keys[g], self.values[g]):
                    t[:, j, :, self.finite[s]:end] = 0
        for s in low:
            self.finite[s] = end

    def check_window(self, window: int) -> None:  # refused past the capacity
        if window > self.capacity:
            raise UsageError(f"{window} positions exceed the cache's {self.capacity}")

    def at(self, positions: Tensor | int, length: int = 1, window: int | None = None) -> At:
        """The new tokens of rows 0..B-1 (slots 0..B-1) at ``positions``: a (B or 1, T) long
        tensor (< 0: a padding token, not cached, seeing nothing), or an int, the first of T
        = ``length`` positions every row shares. ``window``: the keys attended, 0..window-1
        (default: past the furthest position; a host read of ``positions``). A rowwise cache
        takes one token a row (T = 1) and widens the window to whole ``ROWS_CHUNK``s."""
        every = isinstance(positions, int) and length == 1 and window in (None, positions + 1)
        if isinstance(positions, int):
            window = positions + length if window is None else window
            positions = torch.arange(positions, positions + length, device=self.device)[None]
        elif window is None:
            window = int(positions.max()) + 1
        self.check_window(window)
        B, T = positions.shape
        index = positions.masked_fill(positions < 0, self.capacity)  # padding: the scratch
        if not self.rowwise:
            self._make_finite(range(self.slots), window)
            return At(positions, index, window, None if every else visible(positions, window))
        if T != 1:
            raise UsageError(f"a rowwise cache steps one token a row, got positions of "
                             f"shape {(B, T)} (prefills: packed)")
        window = self.step_window(window)
        self.reserve(B - 1)
        self._make_finite(range(B), window)
        mask = visible(positions, window)  # (B, 1, S); additive, per head: (B h, 1, S)
        return At(positions, index, window, mask,
                  to_additive(mask, self.dtype).repeat_interleave(self.kv_heads, dim=0))

    def packed(self, slots: list[int], lengths: list[int], starts: list[int] | None = None
               ) -> At:
        """Several rows' prompts in one forward of ids (1, sum of ``lengths``), end to end:
        prompt i into slot ``slots[i]`` at positions starts[i].. (default 0; past a
        ``load_prefix``), each attending only its own row's keys, as it would alone."""
        starts = [0] * len(slots) if starts is None else starts
        spans, first = [], 0
        for slot, n, start in zip(slots, lengths, starts, strict=True):
            self.check_window(start + n)
            self.reserve(slot)
            self._make_finite([slot], start)
            self.finite[slot] = max(self.finite[slot], start + n)  # the forward fills them
            spans.append((slot, first, first + n))
            first += n
        positions = torch.cat([torch.arange(s, s + n, device=self.device)
                               for n, s in zip(lengths, starts, strict=True)])[None]
        chunks = tuple(tuple((a, b, visible(positions[:, a - start + first:b - start + first],
                                            b) if b - a > 1 else None)
                             for a, b in prefill_chunks(start, start + end - first))
                       for (_, first, end), start in zip(spans, starts, strict=True))
        return At(positions, positions, max(s + n for n, s in zip(lengths, starts, strict=True)),
                  None, spans=tuple(spans), chunks=chunks)

    def step_window(self, longest: int) -> int:
        """A rowwise step's key window (``nn.attend.rows_window``)."""
        return rows_window(longest, self.capacity, self.head_dim)

    def _standard(self, layer: int, q: Tensor, k: Tensor, v: Tensor, at: At,
                  mask: Tensor | None = None, dropout_p: float = 0.0,
                  need_weights: bool = False) -> tuple[Tensor, Tensor | None]:
        """Write k, v (B, h, T, d_k) at ``at``'s positions of slots 0..B-1, attend q (B, G h,
        T, d_k) over their first S keys under ``at``'s mask and ``mask`` (B, T, S), the
        caller's (e.g. padding keys), if given: (B, G h, T, d_k), weights (B, G h, T, S)."""
        keys, values = self.write(layer, k, v, at)
        S, B = at.window, q.size(0)
        mask = at.mask if mask is None else mask if at.mask is None else at.mask & mask
        return attend_heads(q, keys[:B, :, :S], values[:B, :, :S], mask, dropout_p,
                            need_weights)

    def write(self, layer: int, k: Tensor, v: Tensor, at: At) -> tuple[Tensor, Tensor]:
        """Write k, v (B, h, T, d_k) of rows 0..B-1 at ``at``'s positions of slots 0..B-1 (by
        indexed assignment: the compiler and an exported graph keep it in place); returns the
        layer's (slots, h, L + 1, d_k) keys and values (standard kernel)."""
        rows = torch.arange(k.size(0), device=k.device)[:, None]  # (B, 1)
        for buffer, new in ((self.keys[0], k), (self.values[0], v)):  # (B, T, h, d_k) each
            put(buffer, layer, rows, at.index, new.transpose(1, 2))
        return self.keys[0][layer], self.values[0][layer]

    def _rowwise(self, layer: int, q: Tensor, k: Tensor, v: Tensor, at: At,
                 mask: Tensor | None = None, dropout_p: float = 0.0,
                 need_weights: bool = False) -> tuple[Tensor, None]:
        """The row-invariant kernel: a packed prefill, or a step of slots 0..B-1 (T = 1)."""
        if need_weights or dropout_p or mask is not None:
            raise UsageError("a rowwise cache takes no mask of the caller's, gives no attention "
                             "weights and takes no dropout")
        if at.spans:
            return self._prefill(layer, q, k, v, at), None
        h, S, out = self.kv_heads, at.window, []
        for g in range(-(-q.size(0) // self.group)):  # counted by groups: B stays a symbol
            rows = slice(g * self.group, min(q.size(0), (g + 1) * self.group))
            n = rows.stop - rows.start
            slot = torch.arange(n, device=q.device)
            put(self.keys[g], layer, slot, at.index[rows, 0], k[rows, :, 0])
            put(self.values[g], layer, slot, at.index[rows, 0], v[rows, :, 0])
            keys, values = self.keys[g][layer], self.values[g][layer]
            out.append(attend_rows(q[rows], keys[:n, :, :S], values[:n, :, :S],
                                   at.bias[rows.start * h:rows.stop * h]))
        return (torch.cat(out) if len(out) > 1 else out[0]), None

    def _prefill(self, layer: int, q: Tensor, k: Tensor, v: Tensor, at: At) -> Tensor:
        """q (1, G h, sum T, d_k), k, v (1, h, sum T, d_k) of packed prompts into their slots,
        each chunk of queries (``prefill_chunks``) attending the keys up to it, under the
        chunk's mask made once for every layer (``packed``'s ``At.chunks``)."""
        out = []
        for (slot, first, end), chunks in zip(at.spans, at.chunks, strict=True):
            g, j = divmod(slot, self.group)
            keys, values = self.keys[g][layer, j], self.values[g][layer, j]
            shift = chunks[0][0] - first  # a token's position - its index
            keys[:, first + shift:end + shift], values[:, first + shift:end + shift] = \
                k[0, :, first:end], v[0, :, first:end]
            for a, b, mask in chunks:  # positions a..b-1
                out.append(attend_heads(q[:, :, a - shift:b - shift], keys[None, :, :b],
                                        values[None, :, :b], mask, 0.0, False)[0])
        return torch.cat(out, dim=2) if len(out) > 1 else out[0]

    def load_prefix(self, slot: int, keys: Tensor, values: Tensor, length: int) -> None:
        """Start ``slot`` from ``length`` positions made elsewhere: keys and values (N, h, >=
        length, d_k) (``read_prefix``'s); the row continues at position ``length`` (``at`` /
        ``packed(starts=...)``), as after prefilling the same tokens, bit for bit."""
        N, h, n, d_k = keys.shape
        if (N, h, d_k) != (self.layers, self.kv_heads, self.head_dim) or n < length \
                or values.shape != keys.shape:
            raise UsageError(f"load_prefix takes keys and values (N={self.layers}, "
                             f"h={self.kv_heads}, >= {length}, d_k={self.head_dim}), got "
                             f"{tuple(keys.shape)} and {tuple(values.shape)}")
        self.check_window(length)
        self.reserve(slot)
        g, j = divmod(slot, self.group)
        self.keys[g][:, j, :, :length] = keys[:, :, :length]
        self.values[g][:, j, :, :length] = values[:, :, :length]
        self.finite[slot] = max(self.finite[slot], length)

    def read_prefix(self, slot: int, length: int, start: int = 0) -> tuple[Tensor, Tensor]:
        """Copies of slot's positions start..length-1: keys, values (N, h, n, d_k) each."""
        g, j = divmod(slot, self.group)
        return self.keys[g][:, j, :, start:length].clone(), \
            self.values[g][:, j, :, start:length].clone()

    def move(self, src: int, dst: int, length: int) -> None:  # slot src's positions to dst
        self.load_prefix(dst, *self.read_prefix(src, length), length)

    def reorder(self, index: Tensor, length: int) -> None:
        """Keep rows ``index`` (beam search: each hypothesis takes its parent's row), their
        first ``length`` positions copied into spare buffers that then swap places with these
        (no allocation per beam step); standard kernel only."""
        shape = (self.layers, len(index), *self.keys[0].shape[2:])
        if self._spare is None or self._spare[0].shape != shape:
            self._spare = (self.keys[0].new_empty(shape), self.values[0].new_empty(shape))
        for old, new in zip((self.keys[0], self.values[0]), self._spare, strict=True):
            torch.index_select(old[:, :, :, :length], 1, index, out=new[:, :, :, :length])
        self._spare, (self.keys[0], self.values[0]) = (self.keys[0], self.values[0]), self._spare
        self.group = len(index)
        self.finite = [length] * len(index)


__getattr__ = forward(__name__)  # CrossKV, DecoderCache: nn.cross_cache
