"""Teacher-forced attention maps of one sentence pair, for the figures and the report.

Legend: T target length, S source length, h heads. No plotting here (no matplotlib).
"""

from __future__ import annotations

import torch

from decoderkit.nn.layers import AttentionRecord
from decoderkit.nn.masks import padding_mask, target_mask
from decoderkit.nn.seq2seq.model import EncoderDecoder


def attention_weights(model: EncoderDecoder, src: torch.Tensor, tgt: torch.Tensor,
                      ) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Teacher-forced pass over one pair; per decoder layer the (h, T, T) self-attention and
    (h, T, S) cross-attention weights. src (1, S), tgt (1, T) ids (tgt starts with BOS)."""
    src_mask = padding_mask(src, model.config.source_pad_id)
    record = AttentionRecord()
    with torch.no_grad():
        memory = model.encode(src, src_mask)
        model.decode(memory, src_mask, tgt, target_mask(tgt, model.config.pad_id), record=record)
    return [w[0] for w in record.self_attn], [w[0] for w in record.cross_attn]
