"""Multi-head attention (its kernels: ``nn.attend``; its key/value cache: ``nn.cache``).

Legend: B batch, T query length, S key/value length, h heads, d_k = d_model / h,
L cache capacity. Masks are bool, True = may attend (see ``decoderkit.nn.masks``).
"""

from __future__ import annotations


import torch.nn.functional as F
from torch import Tensor, nn

from decoderkit.base.errors import UsageError
from decoderkit.base.moved import forward
from decoderkit.nn.norms import RMSNorm
from decoderkit.nn.rope import rotate
from decoderkit.nn.attend import attend_heads, attention
from decoderkit.nn.cache import At, KVCache
from decoderkit.nn.cross_cache import CrossKV

__all__ = ["MultiHeadAttention", "attention", "check_heads", "check_kv_heads"]
__getattr__ = forward(__name__)  # the kernels (nn.attend) and KVCache (nn.cache) moved


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

    def forward(self, x: Tensor, context: Tensor | None = None, mask: Tensor | None = None,
                cache: KVCache | CrossKV | None = None, need_weights: bool = False,
                rotary: tuple[Tensor, Tensor] | None = None, layer: int = 0,
                at: At | None = None) -> tuple[Tensor, Tensor | None]:
        """Attend from x (B, T, d_model) to context (B, S, d_model), or to x itself.

        head_i = softmax(Q_i K_i^T / sqrt(d_k) + M) V_i;  output = Concat(head_1..h) W_O.
        mask: bool, True = may attend, broadcastable to (B, T, S) (e.g. (B, 1, S),
        (B, T, T), (T, T)). ``cache`` (``nn.cache``), this module being layer ``layer``:
        self-attention, a ``KVCache`` into which the T new keys and values go at ``at``'s
        positions, seeing what its mask (from those positions) and ``mask`` allow;
        cross-attention, a ``CrossKV`` holding context's keys/values, read instead of
        projecting context again (it may hold fewer rows than x: a source's beam hypotheses).
        ``rotary``: RoPE's (cos, sin) (B, 1, T, d_k) of the T new positions (``nn.rope``),
        which rotate self-attention's queries and keys (after ``qk_norm``) before they are
        cached. Returns (output (B, T,
        d_model), weights (B, h, T, S) if need_weights else None).
        """
        d = self.d_model
        for name, t in (("x", x), ("context", context)):
            if t is not None and (t.dim() != 3 or t.size(-1) != d):
                raise UsageError(f"{name} must have shape (B, L, d_model={d}), "
                                 f"got {tuple(t.shape)}")
        p = self.dropout if self.training else 0.0
        if context is None:  # self-attention: Q, K, V from x
            q, k, v = self.split_heads_packed(self.in_proj(x))  # (B, h | h_kv, T, d_k)
            if hasattr(self, "q_norm"):
                q, k = self.q_norm(q), self.k_norm(k)
            if rotary is not None:
                q, k = rotate(q, *rotary), rotate(k, *rotary)
            out, weights = attend_heads(q, k, v, mask, p, need_weights) if cache is None \
                else cache.attend(layer, q, k, v, at, mask, p, need_weights)
        elif cache is None:  # cross-attention: Q from x, K and V from context
            out, weights = attend_heads(self.project_q(x), *self.project_kv(context), mask, p,
                                        need_weights)
        else:  # cross-attention on keys and values projected once
            out, weights = cache.attend(layer, self.project_q(x), mask, p, need_weights)
        return self.out_proj(self.merge_heads(out)), weights  # weights (B, h, T, S)

    def split_heads_packed(self, qkv: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """(B, T, (h + 2 h_kv) d_k) -> q (B, h, T, d_k), k and v (B, h_kv, T, d_k) (views)."""
        kv = self.n_kv_heads * self.d_k
        q, k, v = qkv.split((self.n_heads * self.d_k, kv, kv), dim=-1)
        return self.split_heads(q), self.split_heads(k), self.split_heads(v)
