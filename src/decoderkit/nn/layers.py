"""The feed-forward networks, residual sublayers and the encoder/decoder stacks (their norms:
``nn.norms``).

Legend: B batch, S source length, T target length, d = d_model, f = d_ff.
Each layer's forward reads as the equations, one line per sublayer:
post-norm (the paper, default) x <- LN(x + Dropout(F(x))); pre-norm x <- x + Dropout(F(LN(x))).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch.nn.functional as F
from torch import Tensor, nn

from decoderkit.base.checks import check_choice
from decoderkit.base.moved import forward
from decoderkit.nn.attention import MultiHeadAttention
from decoderkit.nn.cache import At, CrossKV, DecoderCache, KVCache
from decoderkit.nn.norms import make_norm

FFNS = ("mlp", "gated")
__getattr__ = forward(__name__)  # the norms that moved to nn.norms


def gelu_tanh(x: Tensor) -> Tensor:
    """GELU, tanh form: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (GPT-1, GPT-2; HF's
    ``gelu_new``). Differs from the exact erf form by up to about 4e-4 in absolute value."""
    return F.gelu(x, approximate="tanh")


# FFN activations by name: max(0, x); x Phi(x) (exact, erf); its tanh form; swish x sigmoid(x)
ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu, "gelu_tanh": gelu_tanh, "swish": F.silu}


class PositionwiseFeedForward(nn.Module):
    """FFN(x) = act(x W1 + b1) W2 + b2, the same weights at every position.

    x (B, T, d) -> (B, T, d). Parameters: 2 d f + f + d. Dropout after the activation.
    """

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0,
                 activation: str = "relu", bias: bool = True):
        super().__init__()
        check_choice("activation", activation, ACTIVATIONS)
        self.w_1 = nn.Linear(d_model, d_ff, bias=bias)
        self.w_2 = nn.Linear(d_ff, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)
        self.activation = ACTIVATIONS[activation]

    def forward(self, x: Tensor) -> Tensor:
        """x (B, T, d) -> (B, T, d), each position independently."""
        return self.w_2(self.dropout(self.activation(self.w_1(x))))


class GatedFeedForward(PositionwiseFeedForward):
    """FFN(x) = (act(x W1) * x W3) W2 (Shazeer 2020; SwiGLU with activation swish: Llama's
    gate, up and down projections are W1, W3, W2). x (B, T, d) -> (B, T, d).
    Parameters: 3 d f (+ 2 f + d biased). Dropout after the product."""

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0,
                 activation: str = "swish", bias: bool = True):
        super().__init__(d_model, d_ff, dropout, activation, bias)
        self.w_3 = nn.Linear(d_model, d_ff, bias=bias)

    def forward(self, x: Tensor) -> Tensor:
        """x (B, T, d) -> (B, T, d), each position independently."""
        return self.w_2(self.dropout(self.activation(self.w_1(x)) * self.w_3(x)))


@dataclass(frozen=True)
class BlockOptions:
    """A block's choices beyond the paper's and GPT's (the Llama family's); the defaults build
    those blocks as before."""

    n_kv_heads: int | None = None  # key/value heads (grouped-query attention); None: n_heads
    head_dim: int | None = None  # each head's width d_k; None: d_model / n_heads
    qkv_bias: bool | None = None  # biases on q, k, v; None: as ``bias`` (Qwen2: True alone)
    qk_norm: bool = False  # an RMSNorm of each head's queries and keys (Qwen3)
    ffn: str = "mlp"  # "mlp" (PositionwiseFeedForward) or "gated" (GatedFeedForward)
    norm_eps: float | None = None  # the norms' epsilon; None: each norm's own default

    def attention(self, d_model: int, n_heads: int, dropout: float, bias: bool
                  ) -> MultiHeadAttention:
        """The block's attention module with these options."""
        return MultiHeadAttention(d_model, n_heads, dropout, bias, n_kv_heads=self.n_kv_heads,
                                  head_dim=self.head_dim, qkv_bias=self.qkv_bias,
                                  qk_norm=self.qk_norm, norm_eps=self.norm_eps)

    def feed_forward(self, d_model: int, d_ff: int, dropout: float, activation: str,
                     bias: bool) -> PositionwiseFeedForward:
        """The block's FFN with these options."""
        check_choice("ffn", self.ffn, FFNS)
        kind = GatedFeedForward if self.ffn == "gated" else PositionwiseFeedForward
        return kind(d_model, d_ff, dropout, activation, bias)


def inner_dropouts(dropout: float, attention: float | None, ffn: float | None
                   ) -> tuple[float, float]:
    """(attention-weight, FFN-activation) dropout rates: each as given, None meaning
    ``dropout``, the sublayer outputs' rate (Marian's and Hugging Face's separate
    attention/FFN rates; the paper's model has one rate everywhere)."""
    return (dropout if attention is None else attention, dropout if ffn is None else ffn)


class Residual(nn.Module):
    """A residual sublayer around F with its norm, placed by ``norm_first``.

    post-norm: LN(x + Dropout(F(x)));  pre-norm: x + Dropout(F(LN(x))).
    """

    def __init__(self, d_model: int, dropout: float, norm_first: bool, layer_norm: str,
                 norm_bias: bool = True, eps: float | None = None):
        super().__init__()
        self.norm = make_norm(layer_norm, d_model, norm_bias, eps)
        self.dropout = nn.Dropout(dropout)
        self.norm_first = norm_first

    def forward(self, x: Tensor, sublayer) -> Tensor:
        """x (B, T, d) -> (B, T, d); ``sublayer`` maps (B, T, d) -> (B, T, d)."""
        if self.norm_first:
            return x + self.dropout(sublayer(self.norm(x)))
        return self.norm(x + self.dropout(sublayer(x)))


@dataclass
class AttentionRecord:
    """The attention weights of one forward pass, for a caller that asks by passing one in.

    Each layer that is given a record appends its weights, in layer order, and keeps none
    itself: ``self_attn[i]`` is layer i's (B, h, T, T') self-attention (T' = the keys, the
    cached prefix included), ``cross_attn[i]`` a decoder layer's (B, h, T, S); a stack given
    one appends each layer's output, ``outputs[i]`` (B, T, d), before the final norm (the
    logit lens reads them). The record is the call's own: nothing is kept on the model, so
    concurrent forwards of one model never see each other's.
    Recording switches the layers to the reference ``attention()`` (SDPA gives no weights).
    """

    self_attn: list[Tensor] = field(default_factory=list)  # per layer (B, h, T, T')
    cross_attn: list[Tensor] = field(default_factory=list)  # per decoder layer (B, h, T, S)
    outputs: list[Tensor] = field(default_factory=list)  # per layer (B, T, d), unnormed


class EncoderLayer(nn.Module):
    """Self-attention then FFN, each a residual sublayer. x (B, S, d) -> (B, S, d).

    Under a causal mask this is also a GPT block (``nn.lm``), whose incremental decoding passes
    a self-attention ``cache``.
    """

    def __init__(self, d_model: int, n_heads: int, d_ff: int, dropout: float = 0.1,
                 norm_first: bool = False, layer_norm: str = "standard",
                 activation: str = "relu", bias: bool = True, norm_bias: bool = True, *,
                 attention_dropout: float | None = None, ffn_dropout: float | None = None,
                 options: BlockOptions = BlockOptions()):
        super().__init__()
        attn_p, ffn_p = inner_dropouts(dropout, attention_dropout, ffn_dropout)
        o = options
        self.self_attn = o.attention(d_model, n_heads, attn_p, bias)
        self.ffn = o.feed_forward(d_model, d_ff, ffn_p, activation, bias)
        self.res1 = Residual(d_model, dropout, norm_first, layer_norm, norm_bias, o.norm_eps)
        self.res2 = Residual(d_model, dropout, norm_first, layer_norm, norm_bias, o.norm_eps)

    def forward(self, x: Tensor, src_mask: Tensor | None = None,
                record: AttentionRecord | None = None, cache: KVCache | None = None,
                rotary: tuple[Tensor, Tensor] | None = None, layer: int = 0,
                at: At | None = None) -> Tensor:
        """src_mask (B, 1, S) or (B, S, S), True = may attend; ``record`` gets the weights;
        ``cache`` (this block being its layer ``layer``) the keys/values of earlier positions,
        the S new ones written at ``at``'s positions and seeing what its mask says;
        ``rotary`` the new positions' RoPE (cos, sin) (``nn.rope.Rotary``), None without."""
        sink = None if record is None else record.self_attn
        x = self.res1(x, lambda h: _attend(self.self_attn, sink, h, mask=src_mask, cache=cache,
                                           rotary=rotary, layer=layer, at=at))
        return self.res2(x, self.ffn)


class DecoderLayer(nn.Module):
    """Masked self-attention, cross-attention to ``memory``, then FFN.

    x (B, T, d), memory (B, S, d) -> (B, T, d). Parameters (biased, standard norm):
    2 (4 d^2 + 4 d) + (2 d f + f + d) + 6 d.
    """

    def __init__(self, d_model: int, n_heads: int, d_ff: int, dropout: float = 0.1,
                 norm_first: bool = False, layer_norm: str = "standard",
                 activation: str = "relu", bias: bool = True, norm_bias: bool = True, *,
                 attention_dropout: float | None = None, ffn_dropout: float | None = None,
                 options: BlockOptions = BlockOptions()):
        super().__init__()
        attn_p, ffn_p = inner_dropouts(dropout, attention_dropout, ffn_dropout)
        o = options
        self.self_attn = o.attention(d_model, n_heads, attn_p, bias)
        self.cross_attn = o.attention(d_model, n_heads, attn_p, bias)
        self.ffn = o.feed_forward(d_model, d_ff, ffn_p, activation, bias)
        self.res1, self.res2, self.res3 = (
            Residual(d_model, dropout, norm_first, layer_norm, norm_bias, o.norm_eps)
            for _ in range(3))

    def forward(self, x: Tensor, memory: Tensor, src_mask: Tensor | None = None,
                tgt_mask: Tensor | None = None, cache: DecoderCache | None = None,
                record: AttentionRecord | None = None, layer: int = 0,
                at: At | None = None) -> Tensor:
        """src_mask (B, 1, S), tgt_mask (B, T, T) (None with a cache: ``at``'s mask).

        cache: the decoder's caches for incremental decoding, this being layer ``layer``,
        the new positions at ``at``; ``record`` gets the weights.
        """
        self_kv, cross = (None, None) if cache is None else (cache.self_kv, cache.cross)
        self_sink, cross_sink = (None, None) if record is None else (record.self_attn,
                                                                     record.cross_attn)
        x = self.res1(x, lambda h: _attend(self.self_attn, self_sink, h, mask=tgt_mask,
                                           cache=self_kv, layer=layer, at=at))
        x = self.res2(x, lambda h: _attend(self.cross_attn, cross_sink, h, memory,
                                           mask=src_mask, cache=cross, layer=layer))
        return self.res3(x, self.ffn)


def _attend(attn: MultiHeadAttention, sink: list[Tensor] | None, h: Tensor,
            context: Tensor | None = None, *, mask: Tensor | None,
            cache: KVCache | CrossKV | None = None, rotary: tuple[Tensor, Tensor] | None = None,
            layer: int = 0, at: At | None = None) -> Tensor:
    """One attention sublayer's output; its weights appended to ``sink`` (an
    ``AttentionRecord`` list) when one is given."""
    out, weights = attn(h, context, mask=mask, cache=cache, need_weights=sink is not None,
                        rotary=rotary, layer=layer, at=at)
    if sink is not None:
        sink.append(weights)
    return out


class _Stack(nn.Module):
    """N independent copies of a layer; pre-norm stacks end with a final norm.

    ``final_norm`` defaults to ``norm_first`` (``nn.Transformer`` always has one: set True).
    ``norm_bias=False``: every LayerNorm without beta. ``attention_dropout``, ``ffn_dropout``:
    the attention weights' and FFN activation's rates (None: ``dropout``, ``inner_dropouts``).
    """

    layer_type: type[nn.Module]

    def __init__(self, d_model: int, n_heads: int, d_ff: int, n_layers: int,
                 dropout: float = 0.1, norm_first: bool = False, layer_norm: str = "standard",
                 activation: str = "relu", bias: bool = True, final_norm: bool | None = None,
                 norm_bias: bool = True, *, attention_dropout: float | None = None,
                 ffn_dropout: float | None = None, options: BlockOptions = BlockOptions()):
        super().__init__()
        self.layers = nn.ModuleList(
            self.layer_type(d_model, n_heads, d_ff, dropout, norm_first, layer_norm, activation,
                            bias, norm_bias, attention_dropout=attention_dropout,
                            ffn_dropout=ffn_dropout, options=options)
            for _ in range(n_layers)
        )
        use_norm = norm_first if final_norm is None else final_norm
        self.norm = (make_norm(layer_norm, d_model, norm_bias, options.norm_eps) if use_norm
                     else nn.Identity())


class Encoder(_Stack):
    """N independent EncoderLayers; pre-norm stacks end with a final norm."""

    layer_type = EncoderLayer

    def forward(self, x: Tensor, src_mask: Tensor | None = None,
                record: AttentionRecord | None = None, cache: KVCache | None = None,
                rotary: tuple[Tensor, Tensor] | None = None, at: At | None = None) -> Tensor:
        """x (B, S, d), src_mask (B, 1, S) -> memory (B, S, d); ``cache``: every layer's
        self-attention keys/values (a GPT stack's incremental decoding), the new positions
        at ``at``, or None; ``rotary``: RoPE's (cos, sin) of the S positions, or None."""
        for i, layer in enumerate(self.layers):
            x = layer(x, src_mask, record, cache, rotary, i, at)
            if record is not None:
                record.outputs.append(x)
        return self.norm(x)


class Decoder(_Stack):
    """N independent DecoderLayers; pre-norm stacks end with a final norm."""

    layer_type = DecoderLayer

    def forward(self, x: Tensor, memory: Tensor, src_mask: Tensor | None = None,
                tgt_mask: Tensor | None = None, cache: DecoderCache | None = None,
                record: AttentionRecord | None = None, at: At | None = None) -> Tensor:
        """x (B, T, d), memory (B, S, d) -> (B, T, d); ``cache``: the decoder's caches, the
        new positions at ``at``, or None."""
        for i, layer in enumerate(self.layers):
            x = layer(x, memory, src_mask, tgt_mask, cache, record, i, at)
            if record is not None:
                record.outputs.append(x)
        return self.norm(x)
