"""The decoder-only language model (GPT-1, GPT-2, nanoGPT; the Llama family: Llama, Mistral,
Qwen2, Qwen3) built from the library's blocks.

A block is a ``SelfAttentionLayer`` (self-attention then FFN, each a residual sublayer); the
stack is a ``CausalStack`` of them under a causal mask (pre-norm: with a final norm; post-norm,
GPT-1: without), both built from the config's ``BlockSpec``. Logits = N_f(blocks(E[ids] +
P[pos])) W_head^T, with W_head = E when tied. The Llama family's block: RMSNorm, RoPE (queries
and keys rotated by position, no P), a gated (SwiGLU) FFN, grouped-query attention, no biases;
each an option of ``LMConfig``. Incremental decoding passes a ``KVCache`` (``nn.cache``) and the
new tokens' explicit positions in it (``At``).

Legend: B batch, T new positions, P cached positions, d = d_model, V vocabulary size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from decoderkit.base import moved
from decoderkit.base.checks import check_choice, count
from decoderkit.base.config import JsonConfig
from decoderkit.base.errors import UsageError
from decoderkit.nn.embeddings import (
    Generator,
    LearnedPositionalEmbedding,
    PositionalEncoding,
    TokenEmbedding,
)
from decoderkit.nn.config_checks import check_llama_options, check_model_config
from decoderkit.nn.cache import At, KVCache
from decoderkit.nn.layers import AttentionRecord, BlockSpec, CausalStack
from decoderkit.nn.rope import RopeSpec, Rotary

POSITIONS = ("learned", "sinusoidal", "rope")
SIZES = ("vocab_size", "n_layers", "d_model", "n_heads", "d_ff", "max_len")  # MODEL_SIZES' ranges
INIT_STD = 0.02  # GPT-2's N(0, 0.02^2) initialisation of every matrix and embedding


@dataclass(frozen=True)
class LMConfig(JsonConfig):
    """Everything needed to rebuild a decoder-only LM; saved as JSON beside every checkpoint."""

    KIND = "LM"  # names the config in messages (not a field: no annotation)

    vocab_size: int  # V: tokens the embedding and the head cover
    n_layers: int = 12  # blocks
    d_model: int = 768  # model width d
    n_heads: int = 12  # attention heads h (d_model % n_heads == 0)
    d_ff: int = 3072  # feed-forward width f (GPT: 4 d)
    max_len: int = 1024  # context length: positions the model can see (GPT-2 n_positions)
    dropout: float = 0.1  # dropout on embeddings, attention weights and sublayer outputs
    norm_first: bool = True  # True: pre-norm + final LayerNorm (GPT-2); False: post-norm (GPT-1)
    positions: str = "learned"  # "learned" table (GPT) or the fixed "sinusoidal" one
    activation: str = "gelu_tanh"  # FFN activation, a key of nn.ffn.ACTIVATIONS
    bias: bool = True  # biases in the linears and LayerNorms (nanoGPT's bias=False: none)
    tie_head: bool = True  # output head = token embedding matrix (no head bias either way)
    scale_embeddings: bool = False  # multiply token embeddings by sqrt(d_model)
    norm: str = "standard"  # "standard" LayerNorm, or "rms" RMSNorm (Llama: a scale, no beta)
    norm_eps: float = 1e-5  # the norms' epsilon (GPT-2's 1e-5; Llama's rms_norm_eps)
    ffn: str = "mlp"  # "mlp" act(x W1) W2 (GPT), or "gated" (act(x W1) * x W3) W2 (SwiGLU)
    n_kv_heads: int | None = None  # key/value heads (grouped-query; 1: multi-query); None: h
    head_dim: int | None = None  # each head's width d_k; None: d_model / n_heads
    qkv_bias: bool | None = None  # biases on q, k, v; None: as ``bias`` (Qwen2: True alone)
    qk_norm: bool = False  # an RMSNorm of each head's queries and keys before RoPE (Qwen3)
    rope_theta: float = 10000.0  # positions "rope": the frequency base theta
    rope_scaling: str = "default"  # "default", "linear" or "llama3" (nn.rope.ROPE_SCALINGS)
    rope_factor: float = 1.0  # linear / llama3: the context's stretch factor
    rope_low_freq_factor: float = 1.0  # llama3: wavelengths past original / this are scaled
    rope_high_freq_factor: float = 4.0  # llama3: wavelengths under original / this are kept
    rope_original_max_len: int = 8192  # llama3: the context the model was first trained at

    def __post_init__(self):
        check_model_config(self, sizes=SIZES, sinusoidal=self.positions == "sinusoidal",
                           bools=("norm_first", "bias", "tie_head", "scale_embeddings"),
                           head_dim=self.head_dim)
        check_choice("positions", self.positions, POSITIONS)
        check_llama_options(self)

    @property
    def kv_heads(self) -> int:
        """h_kv: the key/value heads of each block."""
        return self.n_heads if self.n_kv_heads is None else self.n_kv_heads

    @property
    def d_head(self) -> int:
        """d_k: each head's width."""
        return self.d_model // self.n_heads if self.head_dim is None else self.head_dim

    def approximate_parameters(self) -> int:
        """Numbers the model's weights file holds, to within its biases and norms (so at least
        this many): the token embedding (and an untied head), a learned position table, N
        blocks of d d_k (2 h + 2 h_kv) + 2df (gated: 3df); 4d^2 + 2df for GPT."""
        d, hd = self.d_model, self.d_head
        tables = self.vocab_size * (1 if self.tie_head else 2)
        tables += self.max_len if self.positions == "learned" else 0
        attention = d * hd * (2 * self.n_heads + 2 * self.kv_heads)
        ffn = (3 if self.ffn == "gated" else 2) * d * self.d_ff
        return tables * d + self.n_layers * (attention + ffn)

    def block_spec(self) -> BlockSpec:
        """Every block's hyper-parameters (``nn.layers.BlockSpec``); the norms' bias is
        ``bias``."""
        return BlockSpec(self.d_model, self.n_heads, self.d_ff, self.dropout, self.norm_first,
                         self.norm, self.activation, self.bias, self.bias,
                         n_kv_heads=self.n_kv_heads, head_dim=self.head_dim,
                         qkv_bias=self.qkv_bias, qk_norm=self.qk_norm, ffn=self.ffn,
                         norm_eps=self.norm_eps)

    def rope(self) -> RopeSpec:
        """The rotation frequencies of positions "rope"."""
        return RopeSpec(self.d_head, self.rope_theta, self.rope_scaling, self.rope_factor,
                        self.rope_low_freq_factor, self.rope_high_freq_factor,
                        self.rope_original_max_len)


def ffn_width(ffn: str, d_model: int) -> int:
    """The FFN width f a block of width d gets unless given: 4 d (GPT), or for a gated FFN
    8 d / 3 rounded up to a multiple of 8 (Llama's rule: its three matrices then hold what the
    plain FFN's two do)."""
    return -(-8 * d_model // 24) * 8 if ffn == "gated" else 4 * d_model


class DecoderOnlyLM(nn.Module):
    """ids (B, T) -> next-token logits (B, T, V); a ``cache`` makes ids the new positions only.

    Parameter names: ``embed`` (tokens), ``pos`` (learned table or sinusoidal buffer; RoPE:
    ``rotary``'s frequencies, a buffer), ``blocks`` (a ``CausalStack``:
    ``layers.N.{self_attn,ffn,res1.norm,res2.norm}``, ``norm``), ``generator.proj`` (the head;
    its weight is ``embed.lut.weight`` when tied).
    """

    def __init__(self, config: LMConfig):
        super().__init__()
        if not isinstance(config, LMConfig):
            raise TypeError(f"config must be an LMConfig, got {type(config).__name__}")
        c = config
        self.config = c
        self.embed = TokenEmbedding(c.vocab_size, c.d_model, scale=c.scale_embeddings)
        if c.positions == "rope":
            self.pos, self.rotary = nn.Dropout(c.dropout), Rotary(c.rope())
        else:
            position_type = LearnedPositionalEmbedding if c.positions == "learned" \
                else PositionalEncoding
            self.pos, self.rotary = position_type(c.d_model, c.dropout, c.max_len), None
        self.blocks = CausalStack(c.block_spec(), c.n_layers)
        self.generator = Generator(c.d_model, c.vocab_size, bias=False)
        self._init_weights()
        if c.tie_head:
            self.generator.proj.weight = self.embed.lut.weight

    def _init_weights(self) -> None:
        """GPT-2's: matrices and embeddings N(0, 0.02^2), the projections into the residual
        stream (attention output, FFN second linear) N(0, (0.02 / sqrt(2 N))^2), biases 0."""
        for name, p in self.named_parameters():
            if p.dim() < 2:
                continue  # biases stay 0, norms (1, 0) from their own init
            deep = name.endswith(("out_proj.weight", "w_2.weight"))
            std = INIT_STD / math.sqrt(2 * self.config.n_layers) if deep else INIT_STD
            nn.init.normal_(p, 0.0, std)
        for m in self.modules():
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)

    def new_cache(self, batch: int, max_len: int, dtype: torch.dtype | None = None,
                  device: torch.device | str | None = None, rowwise: bool = False) -> KVCache:
        """An empty ``KVCache`` of every block for ``batch`` rows (slots; ``rowwise``: as many
        as used, the row-invariant kernel) of ``max_len`` positions (at most the context);
        dtype and device default to the model's."""
        count(1).check("batch", batch)
        count(1, self.config.max_len).check("max_len", max_len)
        c, p = self.config, self.embed.lut.weight
        return KVCache(c.n_layers, c.kv_heads, max_len, c.d_head, slots=batch, rowwise=rowwise,
                       dtype=p.dtype if dtype is None else dtype,
                       device=p.device if device is None else device)

    def features(self, ids: Tensor, cache: KVCache | None = None, at: At | None = None,
                 record: AttentionRecord | None = None) -> Tensor:
        """ids (B, T) -> final hidden states (B, T, d), after the final norm (if any).

        Without a cache: positions 0..T-1 under a causal mask. With one: the T new tokens at
        the positions the caller gives (``at``: ``cache.at(positions)``, or ``cache.packed``
        for prompts end to end), which they are written at and see by ``at``'s mask; the
        position embedding adds those positions, or every attention layer rotates by them
        (RoPE; gpt-fast's ``input_pos``). A padding token (position < 0) is neither cached
        nor seen. ``record`` gets every layer's attention weights (the reference path).
        """
        if cache is None:
            positions = torch.arange(ids.size(-1), device=ids.device)[None]
        elif at is None:
            raise UsageError("a forward with a cache needs its positions: at=cache.at(...)")
        else:
            positions = at.positions.clamp_min(0)
        x = self.embed(ids)  # (B, T, d)
        rotary = None
        if self.rotary is None:
            x = self.pos(x, positions)
        else:
            x, rotary = self.pos(x), self.rotary(positions, x.dtype)
        return self.blocks(x, record, cache, rotary, at)  # (B, T, d)

    def decode_one_token(self, ids: Tensor, cache: KVCache, at: At) -> Tensor:
        """One step of rows decoded together: ids (B, 1) at ``at``'s positions (one a row)
        -> next-token logits (B, V) (gpt-fast's ``decode_one_token``; compiled as a whole by
        ``generation.lm.compiled``)."""
        return self.logits(self.features(ids, cache, at)[:, 0])

    def logits(self, h: Tensor) -> Tensor:
        """Hidden states (..., d) -> raw logits (..., V): h W_head^T, no bias; a bfloat16 or
        float16 model's widened to float32 (what sampling and log-probabilities take)."""
        logits = self.generator.proj(h)
        return logits.float() if logits.dtype in (torch.bfloat16, torch.float16) else logits

    def forward(self, ids: Tensor, cache: KVCache | None = None, at: At | None = None
                ) -> Tensor:
        """ids (B, T) long -> raw next-token logits (B, T, V) (see ``features``)."""
        return self.logits(self.features(ids, cache, at))


__getattr__ = moved.forward(__name__)  # lm_preset, PRESETS: moved to nn.lm.presets
