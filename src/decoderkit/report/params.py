"""Parameter accounting: counts of live modules and the closed forms of seed 000.

d = d_model, f = d_ff, V = vocabulary size.
"""

from __future__ import annotations

from dataclasses import replace

import torch
from torch import nn

from decoderkit.nn.attention import MultiHeadAttention
from decoderkit.nn.embeddings import Generator, LearnedPositionalEmbedding, TokenEmbedding
from decoderkit.nn.ffn import PositionwiseFeedForward
from decoderkit.nn.norms import AnnotatedLayerNorm, RMSNorm
from decoderkit.nn.lm.model import DecoderOnlyLM, LMConfig
from decoderkit.nn.seq2seq.model import EncoderDecoder, ModelConfig


def count_parameters(module: nn.Module) -> int:
    """Number of scalar parameters, each shared tensor counted once."""
    return sum(p.numel() for p in module.parameters())  # parameters() yields a tensor once


def attention_parameters(d_model: int, bias: bool = True) -> int:
    """Q, K, V and output projections: 4 d^2 + 4 d (biases included)."""
    return 4 * d_model * d_model + (4 * d_model if bias else 0)


def ffn_parameters(d_model: int, d_ff: int, bias: bool = True) -> int:
    """Two linears: 2 d f + f + d (biases included)."""
    return 2 * d_model * d_ff + ((d_ff + d_model) if bias else 0)


def decoder_layer_parameters(d_model: int, d_ff: int, bias: bool = True) -> int:
    """2 (4 d^2 + 4 d) + (2 d f + f + d) + 6 d: self- and cross-attention, FFN, three norms.

    At d = 512, f = 2048 this is 4,204,032.
    """
    return (2 * attention_parameters(d_model, bias) + ffn_parameters(d_model, d_ff, bias)
            + 3 * 2 * d_model)


def encoder_layer_parameters(d_model: int, d_ff: int, bias: bool = True,
                             norm_bias: bool = True) -> int:
    """(4 d^2 + 4 d) + (2 d f + f + d) + 4 d: one attention module, FFN, two norms; a GPT
    block is this layer (nanoGPT's bias=False drops the norms' biases too: ``norm_bias``)."""
    norms = 2 * (2 * d_model if norm_bias else d_model)
    return attention_parameters(d_model, bias) + ffn_parameters(d_model, d_ff, bias) + norms


def output_layer_parameters(d_model: int, vocab: int, bias: bool = True) -> int:
    """Vocabulary projection d x V, plus V with a bias (18,944,000 + 37,000 at 512, 37,000)."""
    return d_model * vocab + (vocab if bias else 0)


def parameter_breakdown(model: nn.Module) -> dict[str, int]:
    """Parameters per component of a model, each shared tensor counted once, in the first
    component that holds it. Components: attention, ffn, norms, embeddings, generator.
    """
    kinds = {"attention": [], "ffn": [], "norms": [], "embeddings": [], "generator": []}
    for m in model.modules():
        if isinstance(m, MultiHeadAttention):
            kinds["attention"].append(m)
        elif isinstance(m, PositionwiseFeedForward):
            kinds["ffn"].append(m)
        elif isinstance(m, (TokenEmbedding, LearnedPositionalEmbedding)):
            kinds["embeddings"].append(m)
        elif isinstance(m, Generator):
            kinds["generator"].append(m)
        elif isinstance(m, (nn.LayerNorm, AnnotatedLayerNorm, RMSNorm)):
            kinds["norms"].append(m)
    seen: set[int] = set()
    out: dict[str, int] = {}
    for kind, modules in kinds.items():
        n = 0
        for m in modules:
            for p in m.parameters():
                if id(p) not in seen:
                    seen.add(id(p))
                    n += p.numel()
        out[kind] = n
    out["total"] = count_parameters(model)
    return out


FOOTER = "(each shared tensor counted once, in the first component holding it)"


def parameter_table(config: ModelConfig | LMConfig, name: str | None = None) -> str:
    """The ``decoderkit params`` report of either family's config (``name``: a preset's, put
    first): counts per component of a live (meta) model, then per layer beside the seed 000
    closed forms, shared tensors counted once."""
    lm = isinstance(config, LMConfig)
    with torch.device("meta"):  # shapes only: no memory, no initialisation
        model = DecoderOnlyLM(config) if lm else EncoderDecoder(config)
    c, d, f = config, config.d_model, config.d_ff
    shape = f"N={c.n_layers}, d_model={d}, heads={c.n_heads}, d_ff={f}, "
    lines = [(f"{name}: " if name else "") + shape + (_lm_shape(c) if lm else _seq2seq_shape(c))]
    lines += [f"{part:<26}{n:>14,}" for part, n in parameter_breakdown(model).items()]
    lines += ["", *(_lm_rows(model, c) if lm else _seq2seq_rows(model, c)), FOOTER]
    return "\n".join(lines)


def _seq2seq_shape(c: ModelConfig) -> str:
    return (f"vocab {c.src_vocab:,} -> {c.tgt_vocab:,}, bias={c.bias}, "
            f"{'pre' if c.norm_first else 'post'}-norm, {c.layer_norm} LayerNorm")


def _lm_shape(c: LMConfig) -> str:
    norm = "RMSNorm" if c.norm == "rms" else "LayerNorm"
    heads = f", {c.kv_heads} key/value heads" if c.kv_heads != c.n_heads else ""
    return (f"vocab {c.vocab_size:,}, context {c.max_len:,}, {c.positions} positions, "
            f"bias={c.bias}, {'pre-norm + final ' + norm if c.norm_first else 'post-norm'}"
            f"{heads}{', gated FFN' if c.ffn == 'gated' else ''}")


def _seq2seq_rows(model: EncoderDecoder, c: ModelConfig) -> list[str]:
    """Per encoder and decoder layer (live beside closed form), the stack, the output layer."""
    d, f = c.d_model, c.d_ff
    enc = "(4d^2+4d) + (2df+f+d) + 4d" if c.bias else "4d^2 + 2df + 4d"
    dec = "2(4d^2+4d) + (2df+f+d) + 6d" if c.bias else "8d^2 + 2df + 6d"
    out = ("shared with the target embedding" if c.tie_generator else
           f"{d * c.tgt_vocab:,} + {output_layer_parameters(d, c.tgt_vocab) - d * c.tgt_vocab:,}"
           " (d x V + bias)")
    return [f"{'per encoder layer':<26}{count_parameters(model.encoder.layers[0]):>14,}  "
            f"{enc} = {encoder_layer_parameters(d, f, c.bias):,}",
            f"{'per decoder layer':<26}{count_parameters(model.decoder.layers[0]):>14,}  "
            f"{dec} = {decoder_layer_parameters(d, f, c.bias):,}",
            f"{f'decoder stack ({c.n_layers} layers)':<26}{count_parameters(model.decoder):>14,}",
            f"{'output layer':<26}{out}"]


def _lm_rows(model: DecoderOnlyLM, c: LMConfig) -> list[str]:
    """Per block (live beside closed form), the output head, the whole closed form."""
    d = c.d_model
    gpt = "(4d^2+4d) + (2df+f+d) + 4d" if c.bias else "4d^2 + 2df + 2d"
    llama = ("d d_k (2h + 2h_kv) + " + ("3df" if c.ffn == "gated" else "2df")
             + " + biases + norms")
    block = gpt if is_gpt_block(c) else llama
    head = "shared with the token embedding" if c.tie_head else f"{d * c.vocab_size:,} (d x V)"
    return [f"{'per block':<26}{count_parameters(model.blocks.layers[0]):>14,}  "
            f"{block} = {lm_block_parameters(c):,}",
            f"{'output head':<26}{head}",
            f"{'closed form':<26}{lm_parameters(c):>14,}  "
            "Vd + (learned: Ld) + N block + final norm + (untied: Vd)"]


def is_gpt_block(config: LMConfig) -> bool:
    """Whether the LM's blocks are GPT's (4d^2 + 2df and biases, LayerNorms): none of the
    Llama family's choices (grouped or wider heads, q/k/v biases apart, q/k norms, a gated
    FFN, RMSNorm)."""
    spec = config.block_spec()
    return spec == replace(spec, n_kv_heads=None, head_dim=None, qkv_bias=None, qk_norm=False,
                           ffn="mlp", layer_norm="standard")


def _norm_parameters(c: LMConfig, width: int) -> int:
    """One of the LM's norms over ``width``: a scale, and a shift for a biased LayerNorm."""
    return 2 * width if c.bias and c.norm == "standard" else width


def lm_block_parameters(config: LMConfig) -> int:
    """One block: q, k, v (h, h_kv, h_kv heads of d_k) and the output projection, their biases,
    the q/k norms, the FFN (gated: 3 matrices), its biases, two norms; for a GPT block
    ``encoder_layer_parameters``."""
    c, d, f = config, config.d_model, config.d_ff
    h, kv, hd = c.n_heads, c.kv_heads, c.d_head
    qkv_bias = c.bias if c.qkv_bias is None else c.qkv_bias
    attention = d * hd * (h + 2 * kv) + h * hd * d + (d if c.bias else 0)
    attention += ((h + 2 * kv) * hd if qkv_bias else 0) + (2 * hd if c.qk_norm else 0)
    matrices = 3 if c.ffn == "gated" else 2
    ffn = matrices * d * f + (((matrices - 1) * f + d) if c.bias else 0)
    return attention + ffn + 2 * _norm_parameters(c, d)


def lm_parameters(config: LMConfig) -> int:
    """Closed form of a decoder-only LM's count: V d token embeddings, max_len d learned
    positions, N blocks (``lm_block_parameters``), the final norm (pre-norm), the head (V d
    unless tied)."""
    c, d = config, config.d_model
    norm = _norm_parameters(c, d) if c.norm_first else 0
    return (c.vocab_size * d + (c.max_len * d if c.positions == "learned" else 0)
            + c.n_layers * lm_block_parameters(c) + norm
            + (0 if c.tie_head else c.vocab_size * d))
