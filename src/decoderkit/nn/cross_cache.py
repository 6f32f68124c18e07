"""What an encoder-decoder keeps besides the self-attention ``KVCache``: ``CrossKV``,
cross-attention's keys and values projected from the encoder's memory once (a static pair,
reordered only when sources leave a beam search), and ``DecoderCache``, both of a decoder.

Legend: N layers, B sources, R rows (B or a multiple: a source's beam hypotheses), h heads
(G h query heads), S source positions, T new positions, d_k head width.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from decoderkit.nn.attend import attend_heads, attend_shared
from decoderkit.nn.cache import KVCache


@dataclass
class CrossKV:
    """Cross-attention's keys and values of N layers, (N, B, h, S, d_k) each, projected from
    the encoder's memory once; a source's beam hypotheses share its row (``attend``)."""

    keys: Tensor
    values: Tensor

    def attend(self, layer: int, q: Tensor, mask: Tensor | None, dropout_p: float = 0.0,
               need_weights: bool = False) -> tuple[Tensor, Tensor | None]:
        """q (R, G h, T, d_k), R = B or a multiple (a source's rows consecutive), mask (B or R,
        1, S) -> (R, G h, T, d_k), weights or None."""
        k, v = self.keys[layer], self.values[layer]
        attend = attend_heads if k.size(0) == q.size(0) else attend_shared
        return attend(q, k, v, mask, dropout_p, need_weights)

    def reorder(self, sources: Tensor) -> None:
        """Keep rows ``sources`` (beam search: the sources still searched)."""
        self.keys, self.values = (t.index_select(1, sources) for t in (self.keys, self.values))


@dataclass
class DecoderCache:
    """What incremental decoding keeps of an encoder-decoder: the decoder's self-attention
    ``KVCache`` (standard kernel, one slot a row) and the cross-attention ``CrossKV``."""

    self_kv: KVCache
    cross: CrossKV

    def reorder(self, rows: Tensor, length: int, sources: Tensor | None = None) -> None:
        """Keep self-attention rows ``rows`` (their first ``length`` positions) and, given,
        cross-attention rows ``sources`` (sources leaving the batch; else a source's beam
        hypotheses keep sharing its row)."""
        self.self_kv.reorder(rows, length)
        if sources is not None:
            self.cross.reorder(sources)
