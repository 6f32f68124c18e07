"""The decoder-only language model (GPT-1, GPT-2, nanoGPT) built from the library's blocks.

A GPT block is an ``EncoderLayer`` (self-attention then FFN, each a residual sublayer) under a
causal mask; the stack is an ``Encoder`` (pre-norm: with a final LayerNorm; post-norm, GPT-1:
without). Logits = LN_f(blocks(E[ids] + P[pos])) W_head^T, with W_head = E when tied.
Incremental decoding passes one ``KVCache`` per block (``LMCache``).

Legend: B batch, T new positions, P cached positions, d = d_model, V vocabulary size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
from torch import Tensor, nn

from decoderkit.base.checks import check_choice, count
from decoderkit.base.config import JsonConfig, replace_given
from decoderkit.base.errors import UsageError
from decoderkit.nn.attention import KVCache
from decoderkit.nn.embeddings import (
    Generator,
    LearnedPositionalEmbedding,
    PositionalEncoding,
    TokenEmbedding,
)
from decoderkit.nn.config_checks import check_model_config
from decoderkit.nn.layers import AttentionRecord, Encoder
from decoderkit.nn.masks import causal_mask
from decoderkit.nn.rows_cache import ROWS_CHUNK, PackedPrefill, RowsKVCache

POSITIONS = ("learned", "sinusoidal")
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
    activation: str = "gelu_tanh"  # FFN activation, a key of nn.layers.ACTIVATIONS
    bias: bool = True  # biases in the linears and LayerNorms (nanoGPT's bias=False: none)
    tie_head: bool = True  # output head = token embedding matrix (no head bias either way)
    scale_embeddings: bool = False  # multiply token embeddings by sqrt(d_model)

    def __post_init__(self):
        check_model_config(self, sizes=SIZES, sinusoidal=self.positions == "sinusoidal",
                           bools=("norm_first", "bias", "tie_head", "scale_embeddings"))
        check_choice("positions", self.positions, POSITIONS)

    def approximate_parameters(self) -> int:
        """Numbers the model's weights file holds, to within its biases and norms (so at least
        this many): the token embedding (and an untied head), a learned position table, N
        blocks of 4d^2 + 2df."""
        d = self.d_model
        tables = self.vocab_size * (1 if self.tie_head else 2)
        tables += self.max_len if self.positions == "learned" else 0
        return tables * d + self.n_layers * (4 * d * d + 2 * d * self.d_ff)


_GPT2 = LMConfig(vocab_size=50257)  # LMConfig's defaults are GPT-2 small's: 124,439,808 params


def _gpt2(n_layers: int, d_model: int, n_heads: int) -> LMConfig:
    return replace(_GPT2, n_layers=n_layers, d_model=d_model, n_heads=n_heads, d_ff=4 * d_model)


_PRESETS = {
    # GPT-1 (OpenAIGPTLMHeadModel): post-norm, no final LayerNorm, 40,478 BPE tokens, 512 context
    "gpt1": replace(_GPT2, vocab_size=40478, max_len=512, norm_first=False),
    "gpt2": _GPT2,
    "gpt2-medium": _gpt2(24, 1024, 16),
    "gpt2-large": _gpt2(36, 1280, 20),
    "gpt2-xl": _gpt2(48, 1600, 25),
    # nanoGPT's model.py defaults: GPT-2 small with exact-erf GELU, vocabulary padded to 50,304
    "nanogpt": replace(_GPT2, vocab_size=50304, activation="gelu", dropout=0.0),
}
PRESETS = tuple(_PRESETS)


def lm_preset(name: str, *, vocab_size: int | None = None, n_layers: int | None = None,
              d_model: int | None = None, n_heads: int | None = None, d_ff: int | None = None,
              max_len: int | None = None, dropout: float | None = None,
              norm_first: bool | None = None, positions: str | None = None,
              activation: str | None = None, bias: bool | None = None,
              tie_head: bool | None = None, scale_embeddings: bool | None = None) -> LMConfig:
    """The preset ``name`` (one of ``PRESETS``) with each field given here (not None) replaced.

    The keywords are the fields of decoderkit 0.1, kept for code written then; any field,
    a newer one too, is set with ``dataclasses.replace(lm_preset(name), field=value)``.
    """
    changes = dict(locals())  # the keywords as given (the first statement: nothing else yet)
    name = changes.pop("name")
    check_choice("preset", name, PRESETS)
    return replace_given(_PRESETS[name], changes)


class LMCache:
    """One growing self-attention ``KVCache`` per block, and the rows' left padding.

    ``start`` (B,) long: how many positions at the front of each row are padding (batched
    prompts of different lengths, left-padded); None when no row is padded.
    """

    def __init__(self, model: DecoderOnlyLM, batch: int, max_len: int, dtype: torch.dtype,
                 device: torch.device | str, start: Tensor | None = None):
        c = model.config
        self.layers = [KVCache(batch, c.n_heads, max_len, c.d_model // c.n_heads, dtype=dtype,
                               device=device) for _ in range(c.n_layers)]
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


class RowsCache:
    """The caches of rows decoded together though of different lengths (continuous
    batching): one ``RowsKVCache`` per block, slot i of each holding row i's keys and values
    (``lengths[i]`` positions, at most the context C). A row is prefilled into its slot
    (``slot``: a batch-1 ``LMCache`` over it); a step feeds one token to each of slots
    0..B-1 at its next position and attends all B at once; the caller keeps running rows in
    the first slots (``move`` fills a slot a row left from another).
    """

    def __init__(self, model: DecoderOnlyLM, dtype: torch.dtype, device: torch.device | str):
        c = model.config
        self.context = c.max_len
        capacity = -(-c.max_len // ROWS_CHUNK) * ROWS_CHUNK  # every window fits
        self.layers = [RowsKVCache(c.n_heads, capacity, c.d_model // c.n_heads, dtype=dtype,
                                   device=device) for _ in range(c.n_layers)]
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

    def positions(self, B: int, device: torch.device) -> Tensor:
        """Prepare a step of slots 0..B-1: (B, 1) long, each row's next position (refused at
        the context), which the step then fills."""
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
        at = torch.tensor(lengths, device=device)  # (B,)
        plan = self.layers[0].plan(at, window)
        for layer in self.layers:
            layer.begin(plan)
        self.lengths[:B] = [n + 1 for n in lengths]
        return at[:, None]


class DecoderOnlyLM(nn.Module):
    """ids (B, T) -> next-token logits (B, T, V); a ``cache`` makes ids the new positions only.

    Parameter names: ``embed`` (tokens), ``pos`` (learned table or sinusoidal buffer),
    ``blocks`` (an ``Encoder``: ``layers.N.{self_attn,ffn,res1.norm,res2.norm}``, ``norm``),
    ``generator.proj`` (the head; its weight is ``embed.lut.weight`` when tied).
    """

    def __init__(self, config: LMConfig):
        super().__init__()
        if not isinstance(config, LMConfig):
            raise TypeError(f"config must be an LMConfig, got {type(config).__name__}")
        c = config
        self.config = c
        self.embed = TokenEmbedding(c.vocab_size, c.d_model, scale=c.scale_embeddings)
        position_type = LearnedPositionalEmbedding if c.positions == "learned" \
            else PositionalEncoding
        self.pos = position_type(c.d_model, c.dropout, c.max_len)
        self.blocks = Encoder(c.d_model, c.n_heads, c.d_ff, c.n_layers, c.dropout, c.norm_first,
                              "standard", c.activation, c.bias, norm_bias=c.bias)
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
                  device: torch.device | str | None = None,
                  start: Tensor | None = None) -> LMCache:
        """An empty cache for ``batch`` rows and ``max_len`` positions (at most the context);
        dtype and device default to the model's. ``start``: each row's left padding."""
        count(1).check("batch", batch)
        count(1, self.config.max_len).check("max_len", max_len)
        p = self.embed.lut.weight
        return LMCache(self, batch, max_len, p.dtype if dtype is None else dtype,
                       p.device if device is None else device, start)

    def features(self, ids: Tensor, cache: LMCache | RowsCache | PackedPrefill | None = None,
                 record: AttentionRecord | None = None) -> Tensor:
        """ids (B, T) -> final hidden states (B, T, d), after the final norm (if any).

        Without a cache: positions 0..T-1 under a causal mask. With one: positions P..P+T-1
        after its P cached ones, which they all see; left-padded rows (``cache.start``) start
        their positions at 0 at their first real token and never see their padding. With a
        ``RowsCache``: ids (B, 1), slot b's token at slot b's own next position. With a
        ``PackedPrefill``: ids (1, sum L), its prompts end to end, each from position 0.
        ``record`` gets every layer's attention weights (the reference attention path).
        """
        if isinstance(cache, RowsCache):  # one new token per row, at the row's own position
            if ids.dim() != 2 or ids.size(-1) != 1 or not 1 <= ids.size(0) <= len(cache.lengths):
                raise UsageError(f"a RowsCache step takes ids (B, 1), B at most its "
                                 f"{len(cache.lengths)} slots, got {tuple(ids.shape)}")
            x = self.pos(self.embed(ids), cache.positions(ids.size(0), ids.device))  # (B, 1, d)
            return self.blocks(x, None, None, cache.layers)
        if isinstance(cache, PackedPrefill):
            x = self.pos(self.embed(ids), cache.positions(ids.device))  # (1, sum L, d)
            return self.blocks(x, None, None, cache.layers)
        P = 0 if cache is None else cache.length
        T = ids.size(-1)
        if cache is not None and P + T > cache.capacity:
            raise UsageError(f"{P + T} positions exceed the cache's {cache.capacity} "
                             f"(context length {self.config.max_len})")
        start = None if cache is None else cache.start
        mask = causal_mask(P + T, device=ids.device)[P:] if T > 1 else None  # (T, P + T)
        offset: int | Tensor = P
        if start is not None:  # per row: positions from its first real token, padding hidden
            keys = torch.arange(P + T, device=ids.device)  # (P + T,)
            real = keys[None, None, :] >= start[:, None, None]  # (B, 1, P + T)
            mask = real if mask is None else real & mask  # (B, T, P + T)
            offset = (keys[None, P:] - start[:, None]).clamp_min(0)  # (B, T)
        x = self.pos(self.embed(ids), offset)  # (B, T, d)
        layers = None if cache is None else cache.layers
        return self.blocks(x, mask, record, layers)  # (B, T, d)

    def logits(self, h: Tensor) -> Tensor:
        """Hidden states (..., d) -> raw logits (..., V): h W_head^T, no bias."""
        return self.generator.proj(h)

    def forward(self, ids: Tensor, cache: LMCache | None = None) -> Tensor:
        """ids (B, T) long -> raw next-token logits (B, T, V) (see ``features``)."""
        return self.logits(self.features(ids, cache))
