"""bfloat16 decoding on CPUs that compute it natively: the weights stored bfloat16 (half
float32's bytes to read each step), or int8 with bfloat16 activations (a quarter), the
activations, the key/value cache and the attention in bfloat16, the logits widened to float32.

A CPU with AVX512_BF16 (or AMX) multiplies bfloat16 in hardware; elsewhere oneDNN and
Inductor emulate it, slower than float32, so ``check_native_bf16`` refuses it there in one line
(``lscpu``'s flags name ``avx512_bf16`` / ``amx_bf16``). The int8 weights are per output
channel (symmetric, a scale per row: w ~ scale * round(w / scale)), multiplied by PyTorch's
weight-only kernel ``aten._weight_int8pack_mm`` (bfloat16 x int8 -> bfloat16, the scale
applied after): eagerly its ATen kernel, and compiled, Inductor's int8 weight GEMM template
(it is written for bfloat16 activations: with float32 ones it falls back to scalar code,
PyTorch #131887). A tied head gets its own int8 copy; the embedding lookup stays bfloat16.

The logits differ from float32's by the bfloat16 rounding of the weights and of every sum
(about 2^-8 relative per operation): ``LOGIT_BOUND`` is the bound the tests hold them to on
random models, and tokens agree with float32's wherever float32's margin exceeds it.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from decoderkit.base.errors import UsageError

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}  # --dtype's choices
# |logits - float32's| <= LOGIT_BOUND * (1 + max |float32's logits|): bfloat16 weights, and
# int8 weights with bfloat16 activations (checked by the tests on random models)
LOGIT_BOUND = {"bfloat16": 0.05, "int8": 0.1}


def native_bf16() -> bool:
    """True if this CPU multiplies bfloat16 in hardware (AVX512_BF16 or AMX)."""
    return bool(torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported())


def check_native_bf16(dtype: torch.dtype) -> None:
    """``--dtype bfloat16`` where the CPU has no bfloat16 instructions is refused in one line
    (emulated, it would run slower than float32)."""
    if dtype == torch.bfloat16 and not native_bf16():
        raise UsageError("--dtype bfloat16 needs a CPU with native bfloat16 (lscpu's flags "
                         "avx512_bf16 or amx_bf16); this one has neither: bfloat16 would be "
                         "emulated, slower than --dtype float32")


class Int8WeightOnlyLinear(nn.Module):
    """y = (x W_q^T) * scale + b: int8 weights W_q (out, in) with a bfloat16 scale per output
    row, bfloat16 activations, through ``aten._weight_int8pack_mm``; inference only."""

    def __init__(self, linear: nn.Linear):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        w = linear.weight.detach().float()
        scale = w.abs().amax(dim=1).clamp(min=torch.finfo(torch.float32).tiny) / 127
        self.register_buffer("weight_int8", torch.round(w / scale[:, None]).clamp(-127, 127)
                             .to(torch.int8))
        self.register_buffer("scale", scale.to(torch.bfloat16))
        self.register_buffer("bias", None if linear.bias is None else
                             linear.bias.detach().to(torch.bfloat16))

    def forward(self, x: Tensor) -> Tensor:
        """x (..., in) bfloat16 -> (..., out) bfloat16."""
        y = torch.ops.aten._weight_int8pack_mm(x.reshape(-1, self.in_features),
                                               self.weight_int8, self.scale)
        y = y.reshape(*x.shape[:-1], self.out_features)
        return y if self.bias is None else y + self.bias


def to_bfloat16(model: nn.Module, int8: bool = False) -> nn.Module:
    """``model`` itself in eval mode, its Parameters converted in place to bfloat16 (the
    float32 ones freed; buffers such as RoPE's frequencies stay float32); ``int8``: every
    ``nn.Linear`` (a tied head too) an ``Int8WeightOnlyLinear``, quantized from the float32
    weights."""
    check_native_bf16(torch.bfloat16)
    model.eval()
    if int8:
        for module in list(model.modules()):
            for name, child in list(module.named_children()):
                if type(child) is nn.Linear:
                    setattr(module, name, Int8WeightOnlyLinear(child))
    with torch.no_grad():
        for p in model.parameters():  # a tied Parameter once
            p.data = p.data.to(torch.bfloat16)
    return model
