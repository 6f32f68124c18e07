"""A Transformer block's spec (``BlockSpec``) and what is built from it: the residual sublayer,
the self-attention layer (the encoder's and the decoder-only LM's block), the decoder layer with
cross-attention, and their stacks (the FFNs: ``nn.ffn``; the norms: ``nn.norms``).

Legend: B batch, S source length, T target length, d = d_model, f = d_ff.
Each layer's forward reads as the equations, one line per sublayer:
post-norm (the paper, default) x <- LN(x + Dropout(F(x))); pre-norm x <- x + Dropout(F(LN(x))).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from torch import Tensor, nn

from decoderkit.base.checks import check_choice
from decoderkit.base.moved import forward
from decoderkit.nn.attention import MultiHeadAttention
from decoderkit.nn.cache import At, KVCache
from decoderkit.nn.cross_cache import CrossKV, DecoderCache
from decoderkit.nn.ffn import ACTIVATIONS, FFNS, GatedFeedForward, PositionwiseFeedForward
from decoderkit.nn.masks import causal_mask
from decoderkit.nn.norms import NORM_KINDS, make_norm
from decoderkit.nn.old_blocks import OLD_ARGS, OLD_STACK, old_fields

__getattr__ = forward(__name__)  # the norms (nn.norms) and FFNs (nn.ffn) that moved


@dataclass(frozen=True)
class BlockSpec:
    """One block's hyper-parameters, from which every layer and stack here is built (each
    family's config gives its own: ``ModelConfig.block_spec``, ``LMConfig.block_spec``). The
    defaults are the paper's block; the fields from ``n_kv_heads`` on, the Llama family's."""

    d_model: int  # model width d
    n_heads: int  # attention heads h (of the queries)
    d_ff: int  # feed-forward width f
    dropout: float = 0.1  # on each sublayer's output (and, unless given below, inside it)
    norm_first: bool = False  # False: post-norm LN(x + F(x)) (the paper); True: pre-norm
    layer_norm: str = "standard"  # the norms: "standard", "annotated" or "rms" (nn.norms)
    activation: str = "relu"  # FFN activation, a key of nn.ffn.ACTIVATIONS
    bias: bool = True  # biases in the attention and FFN linears
    norm_bias: bool = True  # a standard LayerNorm's shift beta (False: none, nanoGPT's)
    attention_dropout: float | None = None  # on the attention weights; None: dropout
    ffn_dropout: float | None = None  # after the FFN activation; None: dropout
    n_kv_heads: int | None = None  # key/value heads (grouped-query attention); None: n_heads
    head_dim: int | None = None  # each head's width d_k; None: d_model / n_heads
    qkv_bias: bool | None = None  # biases on q, k, v; None: as ``bias`` (Qwen2: True alone)
    qk_norm: bool = False  # an RMSNorm of each head's queries and keys (Qwen3)
    ffn: str = "mlp"  # "mlp" (PositionwiseFeedForward) or "gated" (GatedFeedForward)
    norm_eps: float | None = None  # the norms' epsilon; None: each norm's own default

    def __post_init__(self):
        check_choice("layer_norm", self.layer_norm, NORM_KINDS)
        check_choice("activation", self.activation, ACTIVATIONS)
        check_choice("ffn", self.ffn, FFNS)

    def attention(self) -> MultiHeadAttention:
        """A self- or cross-attention sublayer of the block."""
        p, _ = inner_dropouts(self.dropout, self.attention_dropout, self.ffn_dropout)
        return MultiHeadAttention(self.d_model, self.n_heads, p, self.bias,
                                  n_kv_heads=self.n_kv_heads, head_dim=self.head_dim,
                                  qkv_bias=self.qkv_bias, qk_norm=self.qk_norm,
                                  norm_eps=self.norm_eps)

    def feed_forward(self) -> PositionwiseFeedForward:
        """The block's FFN (gated or not)."""
        _, p = inner_dropouts(self.dropout, self.attention_dropout, self.ffn_dropout)
        kind = GatedFeedForward if self.ffn == "gated" else PositionwiseFeedForward
        return kind(self.d_model, self.d_ff, p, self.activation, self.bias)

    def residual(self) -> Residual:
        """One residual sublayer's wiring: its norm and output dropout."""
        return Residual(self.d_model, self.dropout, self.norm_first, self.layer_norm,
                        self.norm_bias, self.norm_eps)

    def norm(self) -> nn.Module:
        """A norm of the block's kind over d (a pre-norm stack's final one)."""
        return make_norm(self.layer_norm, self.d_model, self.norm_bias, self.norm_eps)


def check_spec(owner: str, spec: object, old: tuple = (), named: dict | None = None,
               names: tuple[str, ...] = OLD_ARGS) -> tuple[BlockSpec, dict]:
    """(``spec``, {}) for a spec alone; for the form before it (``nn.old_blocks``) the spec
    made and what is not the spec's (n_layers, final_norm); else a ``TypeError`` naming
    ``owner`` and what it got."""
    if isinstance(spec, BlockSpec) and (old or named):
        raise TypeError(f"{owner} takes a BlockSpec alone, got it with {old} {named}")
    if isinstance(spec, BlockSpec):
        return spec, {}
    fields, rest = old_fields(owner, spec, old, named or {}, names)
    try:
        return BlockSpec(**fields), rest
    except TypeError as e:
        raise TypeError(f"{owner}: {e}") from None


def inner_dropouts(dropout: float, attention: float | None, ffn: float | None
                   ) -> tuple[float, float]:
    """(attention-weight, FFN-activation) dropout rates, None meaning ``dropout`` (Marian's
    and Hugging Face's separate rates; the paper's model has one rate everywhere)."""
    return (dropout if attention is None else attention, dropout if ffn is None else ffn)


class Residual(nn.Module):
    """A residual sublayer around F with its norm, placed by ``norm_first``:
    post-norm LN(x + Dropout(F(x))); pre-norm x + Dropout(F(LN(x)))."""

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
    """The attention weights of one forward pass, for a caller that asks by passing one in:
    each layer given a record appends its weights, in layer order, and keeps none itself:
    ``self_attn[i]`` is layer i's (B, h, T, T') self-attention (T' = the keys, the cached
    prefix included), ``cross_attn[i]`` a decoder layer's (B, h, T, S); a stack given one
    appends each layer's output, ``outputs[i]`` (B, T, d), before the final norm (the logit
    lens reads them). The record is the call's own: nothing is kept on the model, so
    concurrent forwards of one model never see each other's. Recording switches the layers
    to the reference ``attention()`` (SDPA gives no weights)."""

    self_attn: list[Tensor] = field(default_factory=list)  # per layer (B, h, T, T')
    cross_attn: list[Tensor] = field(default_factory=list)  # per decoder layer (B, h, T, S)
    outputs: list[Tensor] = field(default_factory=list)  # per layer (B, T, d), unnormed


class SelfAttentionLayer(nn.Module):
    """Self-attention then FFN, each a residual sublayer (torchtune's
    TransformerSelfAttentionLayer). x (B, T, d) -> (B, T, d).

    Under the source's padding mask, the encoder's layer (``EncoderLayer``); under a causal
    mask, a decoder-only LM's block (``CausalStack``), whose incremental decoding passes a
    self-attention ``cache``. Parameters (biased, standard norm): (4 d^2 + 4 d) + (2 d f + f
    + d) + 4 d.
    """

    def __init__(self, spec: BlockSpec, *old, **named):  # old, named: the form before the spec
        super().__init__()
        spec, _ = check_spec(type(self).__name__, spec, old, named)
        self.self_attn = spec.attention()
        self.ffn = spec.feed_forward()
        self.res1, self.res2 = spec.residual(), spec.residual()

    def forward(self, x: Tensor, mask: Tensor | None = None,
                record: AttentionRecord | None = None, cache: KVCache | None = None,
                rotary: tuple[Tensor, Tensor] | None = None, layer: int = 0,
                at: At | None = None) -> Tensor:
        """mask (B, 1, T) or (B, T, T), True = may attend; ``record`` gets the weights;
        ``cache`` (this block being its layer ``layer``) the keys/values of earlier positions,
        the T new ones written at ``at``'s positions and seeing what its mask says;
        ``rotary`` the new positions' RoPE (cos, sin) (``nn.rope.Rotary``), None without."""
        sink = None if record is None else record.self_attn
        x = self.res1(x, lambda h: _attend(self.self_attn, sink, h, mask=mask, cache=cache,
                                           rotary=rotary, layer=layer, at=at))
        return self.res2(x, self.ffn)


class EncoderLayer(SelfAttentionLayer):
    """The encoder's layer: a ``SelfAttentionLayer`` under src_mask (B, 1, S)."""


class DecoderLayer(nn.Module):
    """Masked self-attention, cross-attention to ``memory``, then FFN.

    x (B, T, d), memory (B, S, d) -> (B, T, d). Parameters (biased, standard norm):
    2 (4 d^2 + 4 d) + (2 d f + f + d) + 6 d.
    """

    def __init__(self, spec: BlockSpec, *old, **named):  # old, named: the form before the spec
        super().__init__()
        spec, _ = check_spec(type(self).__name__, spec, old, named)
        self.self_attn = spec.attention()
        self.cross_attn = spec.attention()
        self.ffn = spec.feed_forward()
        self.res1, self.res2, self.res3 = (spec.residual() for _ in range(3))

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
    """N independent copies of a layer built from one ``BlockSpec``; ``final_norm`` (None:
    ``spec.norm_first``, a pre-norm stack ending with a norm; ``nn.Transformer`` always has
    one: True) adds the spec's norm after the last layer."""

    layer_type: type[nn.Module]

    def __init__(self, spec: BlockSpec, n_layers: int | None = None, *old,
                 final_norm: bool | None = None, **named):  # old, named: before the spec
        super().__init__()
        if isinstance(spec, BlockSpec):
            spec, _ = check_spec(type(self).__name__, spec, old, named)  # the spec alone
        else:  # the form before the spec
            kept = named | ({} if final_norm is None else {"final_norm": final_norm})
            spec, rest = check_spec(type(self).__name__, spec, (n_layers, *old), kept, OLD_STACK)
            n_layers, final_norm = rest.get("n_layers"), rest.get("final_norm")
        self.layers = nn.ModuleList(self.layer_type(spec) for _ in range(n_layers))
        use_norm = spec.norm_first if final_norm is None else final_norm
        self.norm = spec.norm() if use_norm else nn.Identity()


class Encoder(_Stack):
    """The encoder: N independent EncoderLayers; pre-norm stacks end with a final norm."""

    layer_type = EncoderLayer

    def forward(self, x: Tensor, src_mask: Tensor | None = None,
                record: AttentionRecord | None = None) -> Tensor:
        """x (B, S, d), src_mask (B, 1, S) -> memory (B, S, d)."""
        for layer in self.layers:
            x = layer(x, src_mask, record)
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


class CausalStack(_Stack):
    """A decoder-only LM's blocks (GPT's, the Llama family's): N independent
    SelfAttentionLayers, each position seeing itself and those before it; pre-norm stacks end
    with a final norm (torchtune's TransformerDecoder without its embedding and head)."""

    layer_type = SelfAttentionLayer

    def forward(self, x: Tensor, record: AttentionRecord | None = None,
                cache: KVCache | None = None, rotary: tuple[Tensor, Tensor] | None = None,
                at: At | None = None) -> Tensor:
        """x (B, T, d) -> (B, T, d). Without a cache positions 0..T-1 under a causal mask;
        with one (every layer's keys/values) the T new positions at ``at``'s, each seeing what
        its mask says (the cached positions before it, and itself); ``rotary``: RoPE's
        (cos, sin) of the T positions, or None."""
        T = x.size(1)
        mask = causal_mask(T, device=x.device) if cache is None and T > 1 else None
        for i, layer in enumerate(self.layers):
            x = layer(x, mask, record, cache, rotary, i, at)
            if record is not None:
                record.outputs.append(x)
        return self.norm(x)
