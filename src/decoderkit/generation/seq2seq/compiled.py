"""A decoding step compiled with ``torch.compile``: the same model call, fewer overheads.

``compile_step(model)`` returns a drop-in ``step`` for ``greedy_decode``, ``sample`` and
``beam_search`` (``generation.compiling``: Inductor, weights frozen). TorchInductor fuses the
small per-step operations (layer norms, residual adds, head reshapes) and runs float32 linears
on MKL's packed GEMM (oneDNN's once the batch size varies); the step's Python and dispatch
overhead goes with them. The cache's growing length becomes a symbolic size after the first
recompile, so one compiled graph serves every later step; another batch size, or beam search
after greedy, compiles again.
"""

from __future__ import annotations

from torch import Tensor

from decoderkit.generation.compiling import RECOMPILE_LIMIT, Compiled, weights_version
from decoderkit.generation.seq2seq.step import decode_step
from decoderkit.nn.cache import At
from decoderkit.nn.seq2seq.model import DecoderCache, EncoderDecoder
from decoderkit.nn.layers import AttentionRecord

__all__ = ["RECOMPILE_LIMIT", "CompiledStep", "compile_step", "weights_version"]


class CompiledStep:
    """``decode_step`` for one model through ``torch.compile`` (inductor, weights frozen)."""

    def __init__(self, model: EncoderDecoder, autotune: bool = False):
        if not isinstance(model, EncoderDecoder):
            raise TypeError(f"model must be an EncoderDecoder, got {type(model).__name__}")
        self.compiled = Compiled(model, decode_step, autotune)
        self.model = model

    def __call__(self, model: EncoderDecoder, memory: Tensor, src_mask: Tensor | None,
                 tgt: Tensor, tgt_mask: Tensor | None, cache: DecoderCache | None,
                 at: At | None = None, record: AttentionRecord | None = None) -> Tensor:
        """``decode_step``'s signature and result: (N, V) log-probabilities. Steps that
        record attention weights (``explain``) run the eager ``decode_step``."""
        if record is not None:
            self.compiled.check(model)
            return decode_step(model, memory, src_mask, tgt, tgt_mask, cache, at, record)
        return self.compiled.call(model, memory, src_mask, tgt, tgt_mask, cache, at)


def compile_step(model: EncoderDecoder, autotune: bool = False) -> CompiledStep:
    """A compiled ``step`` for ``model``; reuse it across calls (compiling is the slow part).

    ``autotune``: also time inductor's generated C++ GEMMs against ATen's for each linear
    (inductor's max-autotune): compiling takes about twice as long; measured here, batch-1
    steps ran 1.2-1.3x faster, batch 16 the same (``benchmarks/log/``).
    """
    return CompiledStep(model, autotune)
