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
from decoderkit.nn.cache import At, KVCache
from decoderkit.nn.lm.model import DecoderOnlyLM


def mark_varying(ids: Tensor, at: At) -> None:
    """Mark the step's sizes that vary as dynamic (one graph for them, not one each): the rows
    (B; one row keeps a graph of its own) and the key window."""
    for t in (ids, at.positions, at.index, at.mask, at.bias):
        torch._dynamo.maybe_mark_dynamic(t, 0)
    for t in (at.mask, at.bias):
        torch._dynamo.maybe_mark_dynamic(t, t.dim() - 1)


class CompiledDecode:
    """``DecoderOnlyLM.decode_one_token`` of one model, compiled."""

    def __init__(self, model: DecoderOnlyLM, autotune: bool = False):
        if not isinstance(model, DecoderOnlyLM):
            raise TypeError(f"model must be a DecoderOnlyLM, got {type(model).__name__}")
        self.compiled = Compiled(model, DecoderOnlyLM.decode_one_token, autotune)

    def __call__(self, ids: Tensor, cache: KVCache, at: At) -> Tensor:
        """ids (B, 1) at ``at`` -> next-token logits (B, V), as ``decode_one_token``."""
        mark_varying(ids, at)
        return self.compiled.call(self.compiled.model, ids, cache, at)


def compile_decoding(model: DecoderOnlyLM, autotune: bool = False) -> DecoderOnlyLM:
    """``model`` in eval mode, its ``decode_one_token`` compiled (in place, as
    ``nn.Module.compile`` does); compiling happens at the first steps. ``autotune``: time
    Inductor's generated GEMMs against ATen's too (compiling takes about twice as long)."""
    model.eval()
    model.decode_one_token = CompiledDecode(model, autotune)
    return model
