"""The encoder-decoder Transformer: its config, the model and ``make_model``.

Legend: B batch, S source length, T target length, d = d_model, V vocabulary size.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from torch import Tensor, nn

from decoderkit.base.checks import FRACTION, check_choice, check_fields, count
from decoderkit.base.config import JsonConfig
from decoderkit.base.errors import UsageError
from decoderkit.nn.cache import At, KVCache
from decoderkit.nn.cross_cache import CrossKV, DecoderCache
from decoderkit.nn.embeddings import (
    POSITION_LAYOUTS,
    Generator,
    PositionalEncoding,
    TokenEmbedding,
)
from decoderkit.nn.config_checks import check_model_config
from decoderkit.nn.layers import AttentionRecord, BlockSpec, Decoder, Encoder
from decoderkit.nn.norms import LAYER_NORMS

SIZES = ("src_vocab", "tgt_vocab", "n_layers", "d_model", "n_heads", "d_ff", "max_len")  # ints
# (each within base.checks.MODEL_SIZES, the model they give within check_parameter_budget)


@dataclass(frozen=True)
class ModelConfig(JsonConfig):
    """Everything needed to rebuild a model; saved as JSON beside every checkpoint."""

    KIND = "model"  # names the config in messages (not a field: no annotation)

    src_vocab: int  # source vocabulary size
    tgt_vocab: int  # target vocabulary size
    n_layers: int = 6  # N: encoder layers and decoder layers (each)
    d_model: int = 512  # model width d
    n_heads: int = 8  # attention heads h (d_model % n_heads == 0)
    d_ff: int = 2048  # feed-forward width f
    dropout: float = 0.1  # dropout on sublayer outputs and embeddings (and, by default, on
    # attention weights and the FFN activation)
    norm_first: bool = False  # False: post-norm LN(x + F(x)) (paper); True: pre-norm
    layer_norm: str = "standard"  # "standard" (nn.LayerNorm numerics) or "annotated"
    activation: str = "relu"  # FFN activation, a key of nn.ffn.ACTIVATIONS
    bias: bool = True  # biases in attention and FFN linears
    tie_embeddings: bool = False  # share source and target embeddings (needs equal vocabs)
    tie_generator: bool = False  # generator weight = target embedding weight
    max_len: int = 512  # rows of the positional-encoding table
    pad_id: int = 0  # the target's padding token id (and the source's unless src_pad_id)
    bos_id: int = 1  # beginning-of-sequence token id (decoder start; may equal pad_id, as Marian's)
    eos_id: int = 2  # end-of-sequence token id
    positions: str = "interleaved"  # sinusoid channels: "interleaved" sin/cos (paper), "split"
    # (all sines, then all cosines: HF Marian) or "marian" (split, Marian's own frequencies)
    scale_embeddings: bool = True  # token embeddings times sqrt(d_model) (paper; Marian's option)
    attention_dropout: float | None = None  # dropout on attention weights; None: dropout's
    # (Marian's --transformer-dropout-attention, whose default is 0)
    ffn_dropout: float | None = None  # dropout after the FFN activation; None: dropout's
    # (Marian's --transformer-dropout-ffn, whose default is 0)
    src_pad_id: int | None = None  # the source's padding id; None: pad_id (Marian's separate
    # vocabularies each pad with their own last id)

    def __post_init__(self):
        check_model_config(self, sizes=SIZES, sinusoidal=True, bools=(
            "norm_first", "bias", "tie_embeddings", "tie_generator", "scale_embeddings"))
        check_choice("layer_norm", self.layer_norm, LAYER_NORMS)
        check_choice("positions", self.positions, POSITION_LAYOUTS)
        check_fields(self, dict.fromkeys(("attention_dropout", "ffn_dropout"), FRACTION),
                     optional=("attention_dropout", "ffn_dropout"))
        if self.tie_embeddings and self.src_vocab != self.tgt_vocab:
            raise UsageError(f"tie_embeddings needs src_vocab == tgt_vocab, "
                             f"got {self.src_vocab} and {self.tgt_vocab}")
        for name in ("pad_id", "bos_id", "eos_id"):  # the target's ids
            check_token_id(name, getattr(self, name), "tgt_vocab", self.tgt_vocab)
        source = "src_pad_id" if self.src_pad_id is not None else \
            "pad_id (also the source's pad: src_pad_id is None)"
        check_token_id(source, self.source_pad_id, "src_vocab", self.src_vocab)

    @property
    def source_pad_id(self) -> int:
        """The id padding sources: ``src_pad_id``, else ``pad_id``."""
        return self.pad_id if self.src_pad_id is None else self.src_pad_id

    def block_spec(self) -> BlockSpec:
        """Every encoder and decoder layer's hyper-parameters (``nn.layers.BlockSpec``)."""
        return BlockSpec(self.d_model, self.n_heads, self.d_ff, self.dropout, self.norm_first,
                         self.layer_norm, self.activation, self.bias,
                         attention_dropout=self.attention_dropout, ffn_dropout=self.ffn_dropout)

    def approximate_parameters(self) -> int:
        """Numbers the model's weights file holds, to within its biases and norms (so at least
        this many): each embedding and the generator once (tied ones once, the position
        tables computed), N encoder (4d^2 + 2df) and N decoder (8d^2 + 2df) layers."""
        d, tables = self.d_model, self.src_vocab + (0 if self.tie_embeddings else self.tgt_vocab)
        tables += 0 if self.tie_generator else self.tgt_vocab
        return tables * d + self.n_layers * (12 * d * d + 4 * d * self.d_ff)


def check_token_id(name: str, value: object, vocab_name: str, vocab: int) -> None:
    """A ``UsageError`` naming ``name``, its vocabulary and ``value`` unless it is an id of that
    vocabulary."""
    ids = count(0, vocab - 1)
    if not ids.accepts(value):
        raise UsageError(f"{name} must be {ids.span} (an id of {vocab_name} {vocab}), "
                         f"got {value!r}")


class EncoderDecoder(nn.Module):
    """Source ids -> memory -> decoder features; the generator is applied separately."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        c = config
        self.config = c
        spec = c.block_spec()
        self.encoder = Encoder(spec, c.n_layers)
        self.decoder = Decoder(spec, c.n_layers)
        self.src_embed = TokenEmbedding(c.src_vocab, c.d_model, c.scale_embeddings)
        self.tgt_embed = TokenEmbedding(c.tgt_vocab, c.d_model, c.scale_embeddings)
        self.src_pos = PositionalEncoding(c.d_model, c.dropout, c.max_len, c.positions)
        self.tgt_pos = PositionalEncoding(c.d_model, c.dropout, c.max_len, c.positions)
        self.generator = Generator(c.d_model, c.tgt_vocab, bias=True)
        self._init_weights()
        if c.tie_embeddings:
            self.tgt_embed.lut.weight = self.src_embed.lut.weight
        if c.tie_generator:
            self.generator.proj.weight = self.tgt_embed.lut.weight

    def _init_weights(self) -> None:
        """Xavier-uniform for every matrix; biases zero, norms at (1, 0)."""
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)
        for m in self.modules():
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)

    def encode(self, src: Tensor, src_mask: Tensor | None = None,
               record: AttentionRecord | None = None) -> Tensor:
        """src (B, S) ids, src_mask (B, 1, S) -> memory (B, S, d); ``record`` gets the
        encoder's self-attention weights."""
        return self.encoder(self.src_pos(self.src_embed(src)), src_mask, record)

    def decode(self, memory: Tensor, src_mask: Tensor | None, tgt: Tensor,
               tgt_mask: Tensor | None, cache: DecoderCache | None = None,
               record: AttentionRecord | None = None, at: At | None = None) -> Tensor:
        """tgt (B, T) ids -> decoder features (B, T, d).

        With a ``cache``, tgt holds only the new positions, at the positions the caller
        gives (``at = cache.self_kv.at(start, T)``), whose mask replaces tgt_mask; without,
        positions 0..T-1 under tgt_mask (B, T, T). ``record`` gets the decoder's self- and
        cross-attention weights.
        """
        if cache is None:
            x = self.tgt_pos(self.tgt_embed(tgt))
        elif at is None:
            raise UsageError("decoding with a cache needs its positions: at=cache.self_kv.at(t)")
        else:
            x = self.tgt_pos(self.tgt_embed(tgt), at.positions)
        return self.decoder(x, memory, src_mask, tgt_mask, cache, record, at)

    def forward(self, src: Tensor, tgt: Tensor, src_mask: Tensor | None = None,
                tgt_mask: Tensor | None = None) -> Tensor:
        """Teacher-forced pass: src (B, S), tgt (B, T) -> decoder features (B, T, d)."""
        return self.decode(self.encode(src, src_mask), src_mask, tgt, tgt_mask)

    def new_cache(self, memory: Tensor, max_len: int) -> DecoderCache:
        """An empty decoding cache for ``memory`` (B, S, d), room for ``max_len`` targets:
        the self-attention ``KVCache`` and the cross-attention keys/values projected from
        memory once, here."""
        c = self.config
        return DecoderCache(KVCache(c.n_layers, c.n_heads, max_len, c.d_model // c.n_heads,
                                    slots=memory.size(0), dtype=memory.dtype,
                                    device=memory.device), self.cross_kv(memory))

    def cross_kv(self, memory: Tensor) -> CrossKV:
        """Every decoder layer's cross-attention keys and values of ``memory`` (B, S, d)."""
        cross = [layer.cross_attn.project_kv(memory) for layer in self.decoder.layers]
        return CrossKV(torch.stack([k for k, _ in cross]), torch.stack([v for _, v in cross]))


PAPER_NAMES = {"N": "n_layers", "h": "n_heads"}  # make_model's keywords named as in the paper


def make_model(src_vocab: int | None = None, tgt_vocab: int | None = None, N: int | None = None,
               d_model: int | None = None, d_ff: int | None = None, h: int | None = None,
               dropout: float | None = None, *, norm_first: bool | None = None,
               layer_norm: str | None = None, activation: str | None = None,
               bias: bool | None = None, tie_embeddings: bool | None = None,
               tie_generator: bool | None = None, max_len: int | None = None,
               pad_id: int | None = None, bos_id: int | None = None, eos_id: int | None = None,
               config: ModelConfig | None = None) -> EncoderDecoder:
    """An ``EncoderDecoder`` (Xavier-initialised) of ``config``, by default ModelConfig's
    (the paper's base model: N=6, d_model=512, d_ff=2048, h=8, dropout=0.1), each
    hyper-parameter given here (not None) replaced: N = n_layers, h = n_heads, the others
    named as in ModelConfig. Without a config, src_vocab and tgt_vocab are needed.

    The keywords are those of decoderkit 0.1; any field, a newer one too, is set through
    ``config`` (``dataclasses.replace`` of a ModelConfig).
    """
    given = dict(locals())  # the arguments as given (the first statement: nothing else yet)
    changes = {PAPER_NAMES.get(k, k): v for k, v in given.items()
               if k != "config" and v is not None}
    if config is not None:
        return EncoderDecoder(replace(config, **changes))
    if src_vocab is None or tgt_vocab is None:
        raise UsageError(f"make_model needs src_vocab and tgt_vocab (or a config), got "
                         f"src_vocab={src_vocab}, tgt_vocab={tgt_vocab}")
    return EncoderDecoder(ModelConfig(**changes))
