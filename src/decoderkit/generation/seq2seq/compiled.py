"""A decoding step compiled with ``torch.compile``: the same model call, fewer overheads.

``compile_step(model)`` returns a drop-in ``step`` for ``greedy_decode``, ``sample`` and
``beam_search``. TorchInductor fuses the small per-step operations (layer norms, residual
adds, head reshapes) and, freezing the weights into the compiled code, runs float32 linears on
MKL's packed GEMM (oneDNN's once the batch size varies); the step's Python and dispatch
overhead goes with them. The cache's growing length becomes a symbolic size after the first
recompile, so one compiled graph serves every later step. The first calls compile (tens of
seconds on a small CPU; a C++ compiler is needed), and so does each new kind of call (another
batch size, beam search after greedy): up to ``RECOMPILE_LIMIT`` graphs, past which new kinds
run eagerly (same results).

Frozen weights are for inference: a weight changed in place after compiling (an optimiser
step, ``load_state_dict``) makes the step raise instead of decoding with the old values.
"""

from __future__ import annotations

import types

import torch
import torch._dynamo.config
import torch._inductor.config
from torch import Tensor

from decoderkit.base.errors import UsageError
from decoderkit.generation.packing import PackedLinear
from decoderkit.generation.seq2seq.step import decode_step
from decoderkit.nn.layers import AttentionRecord
from decoderkit.nn.encoder_decoder import DecoderCache, EncoderDecoder

RECOMPILE_LIMIT = 64  # graphs one compiled step may hold; past it new kinds of call run eagerly


def weights_version(params: list[Tensor]) -> int:
    """Sum of the parameters' in-place update counters: changes whenever a weight does."""
    return sum(p._version for p in params)


class CompiledStep:
    """``decode_step`` for one model through ``torch.compile`` (inductor, weights frozen)."""

    def __init__(self, model: EncoderDecoder, autotune: bool = False):
        if not isinstance(model, EncoderDecoder):
            raise TypeError(f"model must be an EncoderDecoder, got {type(model).__name__}")
        if any(isinstance(m, PackedLinear) for m in model.modules()):
            raise UsageError("compile_step takes a model without prepack(): the compiler "
                             "packs the frozen weights itself")
        self.model = model
        # collected once: walking model.parameters() every step cost 0.65 ms, this list 17 us
        self.params = list(model.parameters())
        self.version = weights_version(self.params)
        self.inductor = {"freezing": True}  # inductor settings, applied around each call
        if autotune:  # time inductor's own C++ GEMM kernels against ATen's for every linear
            self.inductor.update(max_autotune=True, max_autotune_gemm_backends="CPP,ATEN",
                                 autotune_num_choices_displayed=0,  # no timing tables printed
                                 max_autotune_report_choices_stats=False)
        # torch.compile keeps compiled code per code object, guarded by the model's identity
        # but not its weights' values: a private copy of decode_step's code keeps an earlier
        # compile of this model (with other frozen weights) from being reused
        code = decode_step.__code__.replace()
        fresh = types.FunctionType(code, decode_step.__globals__, decode_step.__name__,
                                   decode_step.__defaults__)
        self.fn = torch.compile(fresh)

    def __call__(self, model: EncoderDecoder, memory: Tensor, src_mask: Tensor | None,
                 tgt: Tensor, tgt_mask: Tensor | None, cache: DecoderCache | None,
                 record: AttentionRecord | None = None) -> Tensor:
        """``decode_step``'s signature and result: (N, V) log-probabilities. Steps that
        record attention weights (``explain``) run the eager ``decode_step``."""
        if model is not self.model:
            raise UsageError("this compiled step was made for another model: "
                             "call compile_step(model) for this one")
        if weights_version(self.params) != self.version:
            raise UsageError("the model's weights changed after compile_step froze them: "
                             "compile_step(model) again (or decode without a step)")
        if record is not None:
            return decode_step(model, memory, src_mask, tgt, tgt_mask, cache, record)
        # settings for these calls only: freezing through the config (compile(options=...)
        # ignores it), and room for each kind of call's graphs (first step, later steps, new
        # batch shapes, beam search) past dynamo's default of 8 per function
        with torch._inductor.config.patch(self.inductor), \
                torch._dynamo.config.patch(recompile_limit=RECOMPILE_LIMIT):
            return self.fn(model, memory, src_mask, tgt, tgt_mask, cache)


def compile_step(model: EncoderDecoder, autotune: bool = False) -> CompiledStep:
    """A compiled ``step`` for ``model``; reuse it across calls (compiling is the slow part).

    ``autotune``: also time inductor's generated C++ GEMMs against ATen's for each linear
    (inductor's max-autotune): compiling takes about twice as long; measured here, batch-1
    steps ran 1.2-1.3x faster, batch 16 the same (``benchmarks/log/``).
    """
    return CompiledStep(model, autotune)
