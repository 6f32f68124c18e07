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
from decoderkit.nn.norms import RMSNorm
from decoderkit.nn.rope import rotate


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


def check_heads(d_model: int, n_heads: int) -> None:
    """Heads split d_model evenly (d_k = d_model / n_heads each)."""
    if d_model % n_heads:
        raise UsageError(f"d_model must be divisible by n_heads, "
                         f"got d_model={d_model}, n_heads={n_heads}")


def check_kv_heads(n_heads: int, n_kv_heads: int) -> None:
    """Key/value heads each serve the same number of query heads (grouped-query attention)."""
    if not isinstance(n_kv_heads, int) or n_kv_heads < 1 or n_heads % n_kv_heads:
        raise UsageError(f"n_kv_heads must be a positive divisor of n_heads={n_heads}, "
                         f"got {n_kv_heads!r}")


class KVCache:
    """Keys and values of one attention module during incremental decoding.

    Shape contract: keys and values are (B, h, L, d_k) buffers allocated once;
    ``length`` positions are filled. ``update(k, v)`` appends new positions
    (B, h, t, d_k) and returns the full (B, h, length, d_k) views. A ``static``
    cache (cross-attention) is filled once from ``memory`` and then only read.
    """

    def __init__(self, batch: int, n_heads: int, capacity: int, d_k: int, *,
                 dtype: torch.dtype, device: torch.device | str, static: bool = False):
        keys = torch.empty(batch, n_heads, capacity, d_k, dtype=dtype, device=device)
        self._hold(keys, torch.empty_like(keys), static)

    @classmethod
    def over(cls, keys: Tensor, values: Tensor) -> KVCache:
        """An empty growing cache over given (B, h, L, d_k) buffers (views of a larger one,
        e.g. a ``RowsKVCache`` slot): nothing is allocated."""
        cache = cls.__new__(cls)
        cache._hold(keys, values, False)
        return cache

    def _hold(self, keys: Tensor, values: Tensor, static: bool) -> None:
        """Start empty over the (B, h, L, d_k) buffers ``keys`` and ``values``."""
        self.keys, self.values = keys, values
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
    Q/K/V projections are packed in ``in_proj`` ((h + 2 h_kv) d_k, d_model), rows in the
    order q, k, v, as in ``nn.MultiheadAttention``; ``out_proj`` merges the heads.
    Grouped-query attention: h_kv = ``n_kv_heads`` key/value heads, each serving h / h_kv
    consecutive query heads (1: multi-query); caches hold the h_kv heads only. ``head_dim``:
    d_k given (None: d_model / h); ``qkv_bias``: biases on q, k, v alone (None: as ``bias``);
    ``qk_norm``: an RMSNorm (eps ``norm_eps``) of each head's queries and keys (Qwen3).
    Parameters: 4 d^2 + 4 d with biases (h_kv = h, d_k = d / h).
    """

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0, bias: bool = True, *,
                 n_kv_heads: int | None = None, head_dim: int | None = None,
                 qkv_bias: bool | None = None, qk_norm: bool = False,
                 norm_eps: float | None = None):
        super().__init__()
        if head_dim is None:
            check_heads(d_model, n_heads)
        n_kv = n_heads if n_kv_heads is None else n_kv_heads
        check_kv_heads(n_heads, n_kv)
        self.d_model, self.n_heads, self.n_kv_heads = d_model, n_heads, n_kv
        self.d_k = d_model // n_heads if head_dim is None else head_dim
        self.dropout = dropout
        self.in_proj = nn.Linear(d_model, (n_heads + 2 * n_kv) * self.d_k,
                                 bias=bias if qkv_bias is None else qkv_bias)
        self.out_proj = nn.Linear(n_heads * self.d_k, d_model, bias=bias)
        if qk_norm:
            eps = {} if norm_eps is None else {"eps": norm_eps}
            self.q_norm, self.k_norm = RMSNorm(self.d_k, **eps), RMSNorm(self.d_k, **eps)

    def split_heads(self, x: Tensor) -> Tensor:
        """(B, T, h' d_k) -> (B, h', T, d_k), h' = h or h_kv."""
        B, T, _ = x.shape
        return x.view(B, T, -1, self.d_k).transpose(1, 2)  # (B, h', T, d_k)

    def merge_heads(self, x: Tensor) -> Tensor:
        """(B, h, T, d_k) -> (B, T, h d_k)."""
        B, _, T, _ = x.shape
        return x.transpose(1, 2).reshape(B, T, self.n_heads * self.d_k)  # (B, T, h d_k)

    def project_q(self, x: Tensor) -> Tensor:
        """Queries of a query input (B, T, d_model) -> (B, h, T, d_k)."""
        d, b = self.n_heads * self.d_k, self.in_proj.bias
        return self.split_heads(F.linear(x, self.in_proj.weight[:d], None if b is None else b[:d]))

    def project_kv(self, context: Tensor) -> tuple[Tensor, Tensor]:
        """Keys and values of a key/value input (B, S, d_model) -> two (B, h_kv, S, d_k)."""
        d, b = self.n_heads * self.d_k, self.in_proj.bias
        k, v = F.linear(context, self.in_proj.weight[d:], None if b is None else b[d:]).chunk(
            2, dim=-1)
        return self.split_heads(k), self.split_heads(v)

    def forward(
        self,
        x: Tensor,
        context: Tensor | None = None,
        mask: Tensor | None = None,
        cache: KVCache | None = None,
        need_weights: bool = False,
        rotary: tuple[Tensor, Tensor] | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """Attend from x (B, T, d_model) to context (B, S, d_model), or to x itself.

        head_i = softmax(Q_i K_i^T / sqrt(d_k) + M) V_i;  output = Concat(head_1..h) W_O.
        mask: bool, True = may attend, broadcastable to (B, T, S) (e.g. (B, 1, S),
        (B, T, T), (T, T)). cache: self-attention, a growing ``KVCache`` that T new positions
        extend; cross-attention, a static one holding context's keys/values (filled when
        ``DecoderCache`` is built), read instead of projecting context again. A static cache
        may hold fewer rows than x (``attend_shared``). A cache with its own ``attend``
        (``nn.rows_cache.RowsKVCache``, rows of their own lengths, T = 1) takes the new keys and
        values and attends itself. ``rotary``: RoPE's (cos, sin) (B, 1, T, d_k) of the T new
        positions (``nn.rope``), which rotate self-attention's queries and keys (after
        ``qk_norm``) before they are cached. Returns (output (B, T, d_model),
        weights (B, h, T, S) if need_weights else None).
        """
        d = self.d_model
        for name, t in (("x", x), ("context", context)):
            if t is not None and (t.dim() != 3 or t.size(-1) != d):
                raise UsageError(f"{name} must have shape (B, L, d_model={d}), "
                                 f"got {tuple(t.shape)}")
        if cache is not None and cache.static != (context is not None):
            raise ValueError("a static KVCache serves cross-attention (context given), "
                             "a growing one self-attention (no context)")
        if context is None:  # self-attention: Q, K, V from x
            q, k, v = self.split_heads_packed(self.in_proj(x))  # (B, h | h_kv, T, d_k)
            if hasattr(self, "q_norm"):
                q, k = self.q_norm(q), self.k_norm(k)
            if rotary is not None:
                q, k = rotate(q, *rotary), rotate(k, *rotary)
            if hasattr(cache, "attend"):  # a RowsKVCache: rows of their own lengths
                cache.update(k, v)
                return self.out_proj(self.merge_heads(cache.attend(q))), None
            if cache is not None:
                k, v = cache.update(k, v)  # (B, h, S, d_k), S = positions so far
        else:  # cross-attention: Q from x, K and V from context
            q = self.project_q(x)  # (B, h, T, d_k)
            k, v = self.project_kv(context) if cache is None else cache.get()  # (B', h, S, d_k)
        p = self.dropout if self.training else 0.0
        attend = attend_heads if k.size(0) == q.size(0) else attend_shared
        out, weights = attend(q, k, v, mask, p, need_weights)  # (B, h, T, d_k), (B, h, T, S)
        return self.out_proj(self.merge_heads(out)), weights

    def split_heads_packed(self, qkv: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """(B, T, (h + 2 h_kv) d_k) -> q (B, h, T, d_k), k and v (B, h_kv, T, d_k) (views)."""
        kv = self.n_kv_heads * self.d_k
        q, k, v = qkv.split((self.n_heads * self.d_k, kv, kv), dim=-1)
        return self.split_heads(q), self.split_heads(k), self.split_heads(v)


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
