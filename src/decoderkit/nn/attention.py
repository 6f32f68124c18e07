"""Scaled dot-product attention, multi-head attention and its key/value cache.

Legend: B batch, T query length, S key/value length, h heads, d_k = d_model / h,
L cache capacity. Masks are bool, True = may attend (see ``decoderkit.nn.masks``).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from decoderkit.base.errors import UsageError
from decoderkit.nn.masks import check_mask


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
    """
    d_k = query.size(-1)
    scores = query @ key.transpose(-2, -1) / math.sqrt(d_k)  # (..., T, S)
    if mask is not None:
        check_mask(mask, scores.shape)
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = scores.softmax(dim=-1)
    if mask is not None:  # rows with no visible key: softmax gave NaN -> 0
        weights = weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    if dropout is not None:
        weights = dropout(weights)
    return weights @ value, weights  # (..., T, d_v), (..., T, S)


class KVCache:
    """Keys and values of one attention module during incremental decoding.

    Shape contract: keys and values are (B, h, L, d_k) buffers allocated once;
    ``length`` positions are filled. ``update(k, v)`` appends new positions
    (B, h, t, d_k) and returns the full (B, h, length, d_k) views. A ``static``
    cache (cross-attention) is filled once from ``memory`` and then only read.
    """

    def __init__(self, batch: int, n_heads: int, capacity: int, d_k: int, *,
                 dtype: torch.dtype, device: torch.device | str, static: bool = False):
        self.keys = torch.empty(batch, n_heads, capacity, d_k, dtype=dtype, device=device)
        self.values = torch.empty_like(self.keys)  # (B, h, L, d_k)
        self.length = 0
        self.static = static
        self._spare: tuple[Tensor, Tensor] | None = None  # reorder's target, made on first use

    @property
    def capacity(self) -> int:
        """L: the positions the buffers can hold."""
        return self.keys.size(2)

    def update(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Append k, v (B, h, t, d_k); return all cached keys and values so far."""
        end = self.length + k.size(2)
        if end > self.capacity:
            raise ValueError(f"KVCache overflow: {end} positions > capacity {self.capacity}")
        self.keys[:, :, self.length:end] = k
        self.values[:, :, self.length:end] = v
        self.length = end
        return self.keys[:, :, :end], self.values[:, :, :end]

    def get(self) -> tuple[Tensor, Tensor]:
        """The filled keys and values, (B, h, length, d_k) each."""
        return self.keys[:, :, :self.length], self.values[:, :, :self.length]

    def reorder(self, index: Tensor) -> None:
        """Keep batch rows ``index`` (beam search: each hypothesis takes its parent's row).

        Only the ``length`` filled positions are copied, into a second pair of buffers
        that then swaps places with the first (no allocation per beam step).
        """
        n, shape = self.length, (len(index), *self.keys.shape[1:])  # (B', h, L, d_k)
        if self._spare is None or self._spare[0].shape != shape:
            self._spare = (self.keys.new_empty(shape), self.values.new_empty(shape))
        for old, new in zip((self.keys, self.values), self._spare, strict=True):
            torch.index_select(old[:, :, :n], 0, index, out=new[:, :, :n])
        self._spare, (self.keys, self.values) = (self.keys, self.values), self._spare


class MultiHeadAttention(nn.Module):
    """Multi-head attention; one class for self-attention and cross-attention.

    ``forward(x)`` is self-attention; ``forward(x, context)`` is cross-attention with
    queries from x and keys/values from context (e.g. the encoder ``memory``).
    Q/K/V projections are packed in ``in_proj`` (3 d_model, d_model), rows in the
    order q, k, v, as in ``nn.MultiheadAttention``; ``out_proj`` merges the heads.
    Parameters: 4 d^2 + 4 d with biases.
    """

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0, bias: bool = True):
        super().__init__()
        if d_model % n_heads != 0:
            raise UsageError(
                f"d_model must be divisible by n_heads, got d_model={d_model}, n_heads={n_heads}"
            )
        self.d_model, self.n_heads, self.d_k = d_model, n_heads, d_model // n_heads
        self.dropout = dropout
        self.in_proj = nn.Linear(d_model, 3 * d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)

    def split_heads(self, x: Tensor) -> Tensor:
        """(B, T, d_model) -> (B, h, T, d_k)."""
        B, T, _ = x.shape
        return x.view(B, T, self.n_heads, self.d_k).transpose(1, 2)  # (B, h, T, d_k)

    def merge_heads(self, x: Tensor) -> Tensor:
        """(B, h, T, d_k) -> (B, T, d_model)."""
        B, _, T, _ = x.shape
        return x.transpose(1, 2).reshape(B, T, self.d_model)  # (B, T, d_model)

    def project_kv(self, context: Tensor) -> tuple[Tensor, Tensor]:
        """Keys and values of a key/value input (B, S, d_model) -> two (B, h, S, d_k)."""
        d = self.d_model
        b = None if self.in_proj.bias is None else self.in_proj.bias[d:]
        k, v = F.linear(context, self.in_proj.weight[d:], b).chunk(2, dim=-1)
        return self.split_heads(k), self.split_heads(v)

    def forward(
        self,
        x: Tensor,
        context: Tensor | None = None,
        mask: Tensor | None = None,
        cache: KVCache | None = None,
        need_weights: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """Attend from x (B, T, d_model) to context (B, S, d_model), or to x itself.

        mask: bool, True = may attend, broadcastable to (B, T, S) (e.g. (B, 1, S),
        (B, T, T), (T, T)). cache: a ``KVCache``; a self-attention cache grows by T
        positions, a static cross-attention cache is filled on first use and then
        reused without touching context. Keys/values with fewer rows than x are shared by
        consecutive rows of x (``group_size``). Returns (output (B, T, d_model), weights
        (B, h, T, S) if need_weights else None).
        """
        d = self.d_model
        for name, t in (("x", x), ("context", context)):
            if t is not None and (t.dim() != 3 or t.size(-1) != d):
                raise UsageError(f"{name} must have shape (B, L, d_model={d}), "
                                 f"got {tuple(t.shape)}")
        w, b = self.in_proj.weight, self.in_proj.bias
        if context is None and (cache is None or not cache.static):  # self-attention
            q, k, v = self.split_heads_packed(self.in_proj(x))  # 3 x (B, h, T, d_k)
            if cache is not None:
                k, v = cache.update(k, v)  # (B, h, S, d_k), S = positions so far
        else:  # cross-attention
            q = self.split_heads(F.linear(x, w[:d], None if b is None else b[:d]))
            if cache is not None and cache.length > 0:
                k, v = cache.get()  # computed once per source
            else:
                k, v = self.project_kv(x if context is None else context)  # (B, h, S, d_k)
                if cache is not None:
                    k, v = cache.update(k, v)
        group = self.group_size(q.size(0), k.size(0))
        if group > 1:  # G rows of x per key/value row: their queries side by side
            q = q.unflatten(0, (-1, group)).transpose(1, 2).flatten(2, 3)  # (B, h, G T, d_k)
        if mask is not None:
            check_mask(mask, (q.size(0), q.size(2), k.size(2)))  # (B, T, S)
            mask = mask.unsqueeze(-3) if mask.dim() >= 3 else mask  # broadcast over heads
        p = self.dropout if self.training else 0.0
        if need_weights:
            drop = nn.Dropout(p) if p > 0 else None
            out, weights = attention(q, k, v, mask, drop)
        else:
            # SDPA returns 0 for a row with no visible key (torch >= 2.5: _safe_softmax)
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)
            weights = None
        if group > 1:  # back to one row per x row: (B, h, G T, e) -> (B G, h, T, e)
            out, weights = (None if t is None else
                            t.unflatten(2, (group, -1)).transpose(1, 2).flatten(0, 1)
                            for t in (out, weights))
        return self.out_proj(self.merge_heads(out)), weights

    @staticmethod
    def group_size(n_queries: int, n_keys: int) -> int:
        """G = rows of x per key/value row. Cross-attention may read a static cache with
        fewer rows than x: each cache row then serves G consecutive rows of x (beam search:
        a source's G hypotheses share its memory), so its keys/values are read once."""
        if n_queries % n_keys:
            raise ValueError(f"x has {n_queries} rows, not a multiple of the {n_keys} "
                             f"key/value rows")
        return n_queries // n_keys

    def split_heads_packed(self, qkv: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """(B, T, 3 d_model) -> q, k, v each (B, h, T, d_k)."""
        B, T, _ = qkv.shape
        qkv = qkv.view(B, T, 3, self.n_heads, self.d_k).permute(2, 0, 3, 1, 4)  # (3, B, h, T, d_k)
        return qkv[0], qkv[1], qkv[2]
