"""The decoder-only LM's step compiled with ``torch.compile`` (``generation.compiling``:
Inductor, the weights frozen), as gpt-fast compiles its ``decode_one_token``.

``compile_decoding(model)`` gives ``model`` a compiled ``decode_one_token``: the step every
running row takes (``rows.Rows``), in one graph from the token embedding to the head's logits,
the cache writes in place. The sizes that vary from step to step (the rows B, the attention's
key window) are marked as such, so a few graphs serve every step: one row, and 2 rows or more
(up to 16, then another per 16). Prefills stay eager. Measured on the SmolLM2-135M shape
on a quiet 2-core Zen 4 (``benchmarks/log/``): a batch-1 step of 38-51 ms with ``autotune``
against 68-73 ms eager (Inductor's own C++ GEMMs read the one-row weights faster than ATen's),
its two graphs compiled in 79 s and 99 s.

Unlike the ``rowwise`` copy, compiled steps promise no bit-for-bit row invariance: the GEMM
kernel of one row and of several differ, so a row's logits beside others may differ from alone
in the last bits (the tokens, where one choice does not win by more than that rounding).
"""

from __future__ import annotations

import torch
import torch._dynamo
from torch import Tensor

from decoderkit.generation.compiling import Compiled
from decoderkit.nn.lm.model import DecoderOnlyLM
from decoderkit.nn.lm_cache import RowsCache


def decode_one_token(model: DecoderOnlyLM, ids: Tensor, positions: Tensor,
                     mask: Tensor | None, layers: list) -> Tensor:
    """ids (B, 1) at positions (B, 1) under the cache's mask, on prepared caches ->
    next-token logits (B, V)."""
    return model.logits(model.features_at(ids, positions, mask, layers)[:, 0])


def mark_varying(ids: Tensor, positions: Tensor, cache: RowsCache) -> None:
    """Mark the step's sizes that vary as dynamic (one graph for them, not one each): the rows
    (B; one row keeps a graph of its own) and every layer's key window."""
    for layer in cache.layers:
        torch._dynamo.maybe_mark_dynamic(layer.at, 0)
        torch._dynamo.maybe_mark_dynamic(layer.bias, 0)
        torch._dynamo.maybe_mark_dynamic(layer.bias, 2)
    for t in (ids, positions):
        torch._dynamo.maybe_mark_dynamic(t, 0)


class CompiledDecode:
    """``DecoderOnlyLM.decode_one_token`` of one model, compiled."""

    def __init__(self, model: DecoderOnlyLM, autotune: bool = False):
        if not isinstance(model, DecoderOnlyLM):
            raise TypeError(f"model must be a DecoderOnlyLM, got {type(model).__name__}")
        self.compiled = Compiled(model, decode_one_token, autotune)

    def __call__(self, ids: Tensor, cache: RowsCache) -> Tensor:
        """ids (B, 1) -> next-token logits (B, V), as ``decode_one_token``."""
        positions, mask = cache.prepare(ids)  # as ``features``: the cache's own mask
        mark_varying(ids, positions, cache)
        return self.compiled.call(self.compiled.model, ids, positions, mask, cache.layers)


def compile_decoding(model: DecoderOnlyLM, autotune: bool = False) -> DecoderOnlyLM:
    """``model`` in eval mode, its ``decode_one_token`` compiled (in place, as
    ``nn.Module.compile`` does); compiling happens at the first steps. ``autotune``: time
    Inductor's generated GEMMs against ATen's too (compiling takes about twice as long)."""
    model.eval()
    model.decode_one_token = CompiledDecode(model, autotune)
    return model
