"""The decoder-block family, written once with switches: the reference and its known mistakes.

``Spec`` names every place a learner's block can differ from the textbook; the defaults are
seed 002's exercise (pre-norm, population variance, eps inside the root, -inf, softmax over
keys). A mistake in ``catalogue`` is a ``Spec`` with one switch changed, run on the learner's
own inputs and weights, so "your output equals variant X" is a diagnosis. Everything is
computed in float64. Masks here are bool, True = may attend (each item converts its own).

Legend: T queries, S keys, D = d_model, F = d_ff, h heads, d_k = D / h.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
from torch import Tensor

from decoderkit.nn.attention import MultiHeadAttention
from decoderkit.nn.ffn import ACTIVATIONS


@dataclass(frozen=True)
class Spec:
    """One member of the family; each field is a place a learner can go wrong."""

    ln_var: str = "population"  # "population" (divide by D), "sample" (D - 1), or "rms":
    #                             RMSNorm (no mean subtracted, x / sqrt(mean x^2 + eps))
    ln_eps: str = "sqrt"  # "sqrt": /sqrt(var + eps); "std": /(std + eps); "after": /std + eps
    ln_eps_value: float = 1e-5  # the epsilon
    scale: str = "sqrt_dk"  # scores / sqrt(d_k); "none"; "dk" (no root); "sqrt_dmodel"
    causal: str = "causal"  # self-attention visibility: "causal" (j <= i), "no_diagonal"
    #                         (j < i), "flipped" (the complement), "none", or "float01": a float
    #                         0/1 mask that nn.MultiheadAttention adds to the scores
    mask: str = "before"  # "before": -inf into the scores; "after": zero weights after softmax
    blocked: float = -math.inf  # the score a blocked key gets
    softmax_dim: int = -1  # -1: over keys (right); -2: over queries (wrong axis)
    norm: str = "pre"  # "pre": x + F(LN x); "post": LN(x + F(x)); "pre_on_normed": LN x + F(LN x)
    cross_causal: bool = False  # cross-attention wrongly masked causally
    enc_norm: bool = False  # enc_out normalised (with the stage's gamma/beta) before use
    final_norm: bool = False  # an extra LayerNorm (the last stage's) on the output
    relu: str = "hidden"  # "hidden": ReLU(x W1 + b1) W2; "none"; "output": ReLU(.. W2 + b2);
    #                       "gelu" or "swish": that activation in ReLU's place
    ffn_bias: str = "both"  # "both", "no_b1", "no_b2"
    w1_transposed: bool = False  # x W1^T instead of x W1 (only runs when D = F)
    heads: str = "transpose"  # "transpose": view then transpose(1, 2); "view": reshape only
    only: int | None = None  # the switches act in this stage only (0 self, 1 cross, 2 FFN)

    def but(self, **changes) -> Spec:
        """This spec with some switches changed."""
        return replace(self, **changes)


def layer_norm(x: Tensor, gamma: Tensor, beta: Tensor, spec: Spec) -> Tensor:
    """gamma (x - mean) / sqrt(var + eps) + beta over the last axis, or a variant."""
    if spec.ln_var == "rms":  # the Llama family's norm, the exercise's beta still added
        return gamma * x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + spec.ln_eps_value) + beta
    mean = x.mean(-1, keepdim=True)
    var = x.var(-1, keepdim=True, correction=1 if spec.ln_var == "sample" else 0)
    eps = spec.ln_eps_value
    if spec.ln_eps == "sqrt":
        normed = (x - mean) / torch.sqrt(var + eps)
    elif spec.ln_eps == "std":
        normed = (x - mean) / (torch.sqrt(var) + eps)
    else:  # "after"
        normed = (x - mean) / torch.sqrt(var) + eps
    return gamma * normed + beta


def visibility(T: int, S: int, kind: str) -> Tensor | None:
    """(T, S) bool, True = may attend, for a self-attention visibility kind; None = all.
    "float01" gives the float scores bias a float (not bool) causal mask turns into."""
    lower = torch.ones(T, S, dtype=torch.bool).tril()  # j <= i
    if kind == "float01":
        return (~lower).double()  # 1.0 added to each future score: nothing is blocked
    if kind == "causal":
        return lower
    if kind == "no_diagonal":
        return torch.ones(T, S, dtype=torch.bool).tril(-1)
    if kind == "flipped":
        return ~lower
    return None


def attend(q: Tensor, k: Tensor, v: Tensor, allowed: Tensor | None, spec: Spec,
           width: int | None = None) -> tuple[Tensor, Tensor]:
    """softmax(q k^T / sqrt(d_k) + M) v or a variant -> (output, weights).

    q (..., T, d_k), k (..., S, d_k), v (..., S, d_v); ``width`` is d_model for the
    "sqrt_dmodel" mistake. A row with no visible key gives NaN, as the learner's would.
    """
    d_k = q.size(-1)
    divisor = {"sqrt_dk": math.sqrt(d_k), "none": 1.0, "dk": float(d_k),
               "sqrt_dmodel": math.sqrt(width or d_k)}[spec.scale]
    scores = q @ k.transpose(-2, -1) / divisor  # (..., T, S)
    if allowed is not None and allowed.dtype.is_floating_point:  # an additive mask
        return _weighted(scores + allowed, v, None, spec)
    return _weighted(scores, v, allowed, spec)


def _weighted(scores: Tensor, v: Tensor, allowed: Tensor | None,
              spec: Spec) -> tuple[Tensor, Tensor]:
    """Mask (or not), softmax, weight the values."""
    if allowed is not None and spec.mask == "before":
        scores = scores.masked_fill(~allowed, spec.blocked)
    weights = scores.softmax(dim=spec.softmax_dim)
    if allowed is not None and spec.mask == "after":
        weights = weights * allowed
    return weights @ v, weights


@dataclass(frozen=True)
class Projections:
    """One multi-head attention's weights, nn.Linear orientation (out, in)."""

    wq: Tensor  # (D, D)
    bq: Tensor | None  # (D,)
    wk: Tensor
    bk: Tensor | None
    wv: Tensor
    bv: Tensor | None
    wo: Tensor
    bo: Tensor | None
    heads: int  # h


def load_attention(ours: MultiHeadAttention, p: Projections) -> MultiHeadAttention:
    """decoderkit's attention holding a learner's projections (q, k, v rows packed in
    ``in_proj``, as ours stores them); returns ``ours``."""
    with torch.no_grad():
        ours.in_proj.weight.copy_(torch.cat([p.wq, p.wk, p.wv]))
        ours.in_proj.bias.copy_(torch.cat([p.bq, p.bk, p.bv]))
        ours.out_proj.weight.copy_(p.wo)
        ours.out_proj.bias.copy_(p.bo)
    return ours


def multi_head(x: Tensor, context: Tensor, allowed: Tensor | None, p: Projections,
               spec: Spec) -> Tensor:
    """Multi-head attention from x (B, T, D) to context (B, S, D) -> (B, T, D).

    ``allowed`` broadcasts to (B, T, S) (True = may attend) and over the heads.
    """
    B, T, D = x.shape
    h, d_k = p.heads, D // p.heads

    def project(t: Tensor, w: Tensor, b: Tensor | None) -> Tensor:
        y = t @ w.T + (0 if b is None else b)  # (B, L, D)
        if spec.heads == "view":
            return y.reshape(B, h, -1, d_k)  # (B, h, L, d_k): scrambles positions and heads
        return y.view(B, -1, h, d_k).transpose(1, 2)  # (B, h, L, d_k)

    q, k, v = project(x, p.wq, p.bq), project(context, p.wk, p.bk), project(context, p.wv, p.bv)
    mask = None if allowed is None else allowed.unsqueeze(-3)  # broadcast over heads
    out, _ = attend(q, k, v, mask, spec, width=D)  # (B, h, T, d_k)
    out = out.transpose(1, 2).reshape(B, T, D)  # (B, T, D)
    return out @ p.wo.T + (0 if p.bo is None else p.bo)


def feed_forward(x: Tensor, w1: Tensor, b1: Tensor, w2: Tensor, b2: Tensor,
                 spec: Spec) -> Tensor:
    """ReLU(x W1 + b1) W2 + b2 or a variant; W1 (D, F), W2 (F, D) (math orientation)."""
    w1 = w1.T if spec.w1_transposed else w1
    hidden = x @ w1 + (0 if spec.ffn_bias == "no_b1" else b1)  # (..., F)
    if spec.relu == "hidden":
        hidden = hidden.relu()
    elif spec.relu in ("gelu", "swish"):
        hidden = ACTIVATIONS[spec.relu](hidden)
    out = hidden @ w2 + (0 if spec.ffn_bias == "no_b2" else b2)  # (..., D)
    return out.relu() if spec.relu == "output" else out


@dataclass(frozen=True)
class BlockWeights:
    """A decoder block's weights: norms (gamma, beta) x 3, FFN in math orientation, and
    the two attentions' projections (None: seed 002's identity projections, one head)."""

    norms: tuple[tuple[Tensor, Tensor], ...]  # ((gamma1, beta1), (gamma2, beta2), (gamma3, ...))
    w1: Tensor  # (D, F)
    b1: Tensor  # (F,)
    w2: Tensor  # (F, D)
    b2: Tensor  # (D,)
    self_attn: Projections | None = None
    cross_attn: Projections | None = None


def residual_stage(x: Tensor, norm, sublayer, spec: Spec) -> Tensor:
    """One residual stage: x + F(LN x) (pre), LN(x + F x) (post), or LN x + F(LN x)."""
    if spec.norm == "post":
        return norm(x + sublayer(x))
    h = norm(x)
    return (h if spec.norm == "pre_on_normed" else x) + sublayer(h)


def decoder_block(x: Tensor, enc: Tensor, w: BlockWeights, spec: Spec,
                  self_allowed: Tensor | None, base: Spec | None = None) -> Tensor:
    """Self-attention, cross-attention, FFN, each a residual stage placed by ``spec.norm``.

    x (..., T, D), enc (..., S, D); ``self_allowed`` (T, T) True = may attend (the mask the
    block uses for self-attention, already including any polarity mistake). With
    ``spec.only`` set, the other stages follow ``base`` (a mistake made in one place).
    """
    T, S = x.size(-2), enc.size(-2)
    specs = [spec if spec.only in (None, i) or base is None else base for i in range(3)]

    def stage(t: Tensor, i: int, sublayer) -> Tensor:
        return residual_stage(t, lambda u: layer_norm(u, *w.norms[i], specs[i]), sublayer,
                              specs[i])

    def attention(query: Tensor, context: Tensor, allowed: Tensor | None,
                  p: Projections | None, s: Spec) -> Tensor:
        if p is None:
            return attend(query, context, context, allowed, s)[0]
        return multi_head(query, context, allowed, p, s)

    memory = layer_norm(enc, *w.norms[1], specs[1]) if specs[1].enc_norm else enc
    cross_allowed = visibility(T, S, "causal") if specs[1].cross_causal else None
    x = stage(x, 0, lambda h: attention(h, h, self_allowed, w.self_attn, specs[0]))
    x = stage(x, 1, lambda h: attention(h, memory, cross_allowed, w.cross_attn, specs[1]))
    x = stage(x, 2, lambda h: feed_forward(h, w.w1, w.b1, w.w2, w.b2, specs[2]))
    return layer_norm(x, *w.norms[2], spec) if spec.final_norm else x


def placements(base: Spec, changes: dict) -> list[Spec]:
    """A mistake made everywhere, or in only one of the three stages; one whose changes pin
    the stage (``only``; None: everywhere) in that placement alone (norm placement is named
    per sublayer: ``catalogue.in_each_sublayer``)."""
    if "only" in changes:
        return [base.but(**changes)]
    return [base.but(**changes, only=only) for only in (None, 0, 1, 2)]
