"""Parameter accounting: counts of live modules and the closed forms of seed 000.

d = d_model, f = d_ff, V = vocabulary size.
"""

from __future__ import annotations

from torch import nn

from .attention import MultiHeadAttention
from .embeddings import Generator, TokenEmbedding
from .layers import AnnotatedLayerNorm, PositionwiseFeedForward


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


def encoder_layer_parameters(d_model: int, d_ff: int, bias: bool = True) -> int:
    """(4 d^2 + 4 d) + (2 d f + f + d) + 4 d: one attention module, FFN, two norms."""
    return attention_parameters(d_model, bias) + ffn_parameters(d_model, d_ff, bias) + 4 * d_model


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
        elif isinstance(m, TokenEmbedding):
            kinds["embeddings"].append(m)
        elif isinstance(m, Generator):
            kinds["generator"].append(m)
        elif isinstance(m, (nn.LayerNorm, AnnotatedLayerNorm)):
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
