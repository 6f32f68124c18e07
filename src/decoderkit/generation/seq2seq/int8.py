"""The encoder-decoder's int8 copy (``generation.int8``: every linear int8, each input row its
own scale), its cross-attentions split first.

The cross-attention's packed ``in_proj`` is sliced, not called (query rows every step,
key/value rows once per source), which a quantized module cannot serve: the copy's
cross-attentions are ``SplitCrossAttention``s, their query and key/value rows two int8 linears.
(Left float32, its query product took MKL's GEMV alone and its GEMM in a batch, and a line's
score moved in the last bits with its companions.)
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from decoderkit.generation import int8
from decoderkit.nn.attention import MultiHeadAttention
from decoderkit.nn.layers import DecoderLayer
from decoderkit.nn.seq2seq.model import EncoderDecoder


def quantize_int8(model: EncoderDecoder) -> EncoderDecoder:
    """An inference copy of ``model`` (eval mode, CPU) with int8 linears, its cross-attentions
    split; ``model`` unchanged."""
    if not isinstance(model, EncoderDecoder):
        raise TypeError(f"model must be an EncoderDecoder, got {type(model).__name__}")
    return int8.quantize_int8(model, split_cross_attentions)


def split_cross_attentions(model: nn.Module) -> None:
    """Each decoder layer's cross-attention made a ``SplitCrossAttention``, in place."""
    for m in model.modules():
        if isinstance(m, DecoderLayer):
            m.cross_attn = SplitCrossAttention.split(m.cross_attn)


class SplitCrossAttention(MultiHeadAttention):
    """Cross-attention whose query and key/value projections are two linears (``q_proj``,
    ``kv_proj``: the rows of ``in_proj``, which it no longer holds), so each can be int8."""

    @classmethod
    def split(cls, attn: MultiHeadAttention) -> SplitCrossAttention:
        """``attn`` itself, re-classed, its ``in_proj`` replaced by the two linears."""
        d, w, b = attn.d_model, attn.in_proj.weight.detach(), attn.in_proj.bias
        parts = []
        for rows in (slice(0, d), slice(d, 3 * d)):
            part = nn.Linear(d, rows.stop - rows.start, bias=b is not None)
            with torch.no_grad():
                part.weight.copy_(w[rows])
                if b is not None:
                    part.bias.copy_(b[rows])
            parts.append(part)
        attn.__class__ = cls
        del attn.in_proj
        attn.q_proj, attn.kv_proj = parts
        return attn

    def project_q(self, x: Tensor) -> Tensor:
        """Queries (B, T, d_model) -> (B, h, T, d_k)."""
        return self.split_heads(self.q_proj(x))

    def project_kv(self, context: Tensor) -> tuple[Tensor, Tensor]:
        """Keys and values of (B, S, d_model) -> two (B, h, S, d_k)."""
        k, v = self.kv_proj(context).chunk(2, dim=-1)
        return self.split_heads(k), self.split_heads(v)
