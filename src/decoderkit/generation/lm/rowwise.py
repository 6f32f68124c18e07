"""What ``lm sample``, ``lm chat`` and the LM server decode with: ``for_inference(model, ...)``
picks the copy of a model an engine runs, the row-invariant one (``nn.rowwise``: every output
row computed alike whatever rows share the call, the default), the int8 one
(``generation.int8``), the bfloat16 one (``generation.bfloat16``) or the compiled step
(``generation.lm.compiled``). The copies' modules are ``nn``'s or the engines' own; this module
only chooses. (``RowwiseLinear``, ``RowInvariant``, ``ACTIVATION_WIDTH``, ``rowwise`` and
``rowwise_available`` moved to ``nn.rowwise``: the old names forward with a warning.)
"""

from __future__ import annotations

import torch
from torch import nn

from decoderkit.base.checks import check_autotune
from decoderkit.base.errors import UsageError
from decoderkit.base.moved import forward
from decoderkit.nn.rowwise import rowwise

__getattr__ = forward(__name__)  # RowwiseLinear, RowInvariant, ...: moved to nn.rowwise


def for_inference(model: nn.Module, int8: bool = False, compile: bool = False,
                  autotune: bool = False, dtype: torch.dtype = torch.float32) -> nn.Module:
    """What ``lm sample`` and the server run: the int8 copy (``generation.int8``, every linear
    fbgemm int8) or the ``rowwise`` copy; ``model`` is left as it was. ``compile``: ``model``
    itself, float32, its step compiled (``generation.lm.compiled``). ``dtype`` bfloat16:
    ``model`` itself converted (``generation.bfloat16``; ``int8``: int8 weights with bfloat16
    activations), compiled or not."""
    check_autotune(compile, autotune)
    if dtype == torch.bfloat16:
        from decoderkit.generation.bfloat16 import to_bfloat16

        model = to_bfloat16(model, int8)
        if not compile:
            return model
    elif dtype != torch.float32:
        raise UsageError(f"dtype must be float32 or bfloat16, got {dtype}")
    elif int8 and compile:  # measured: benchmarks/log/2026-12.md, llama_cpu.py --compile
        raise UsageError("--int8 with --compile: the int8 copy's fbgemm linears ran 2x slower "
                         "compiled (8.6 against 17.4 tokens/s); use one or the other (or "
                         "--dtype bfloat16 --int8, on a CPU with native bfloat16)")
    if compile:  # imported here: torch.compile's machinery adds about 1 s to start-up
        from decoderkit.generation.lm.compiled import compile_decoding

        return compile_decoding(model, autotune)
    if int8:  # imported here: quantization's machinery is not needed otherwise
        from decoderkit.generation.int8 import quantize_int8

        return quantize_int8(model)
    return rowwise(model)
