"""int8 inference: every linear's weight in int8, its input quantized to int8 at each call.

``quantize_int8(model)`` returns a copy whose linears run fbgemm's int8 GEMM (weights per
output channel) through PyTorch's ``torch.ao.quantization.quantize_dynamic``, each input row
with its own activation scale (``RowScaledInt8``): fbgemm's dynamic quantization takes one
scale per call, which made a line's tokens depend on the lines batched with it. That API is
deprecated in favour of ``torchao``; torchao 0.18's ``Int8DynamicActivationInt8WeightConfig``
(per-token scales too) works with torch 2.13 on CPU but was 5-10x slower than float32 in eager
mode here (no fast CPU int8 kernel outside torch.compile), so the fbgemm path is used
(``benchmarks/log/``). The search code is unchanged and the
copy works with ``compile_step``; tokens differ from float32 only through quantization.

Each family readies its copy first where it must (``prepare``): the encoder-decoder's
cross-attentions are split (``generation.seq2seq.int8``); a ``DecoderOnlyLM`` has nothing to
split, every linear is int8. A tied head gets its own int8 copy of the embedding matrix (the
embedding lookup stays float32), so the copy holds the d V head weights twice (once float32,
once int8); the float model keeps one shared matrix.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable

import torch
from torch import Tensor, nn

from decoderkit.base import moved
from decoderkit.base.config import JsonConfig
from decoderkit.base.errors import UsageError
from decoderkit.nn.packing import PackedLinear


def int8_available() -> bool:
    """True if this PyTorch build has fbgemm's int8 kernels (x86 CPUs)."""
    return "fbgemm" in torch.backends.quantized.supported_engines


def quantize_int8(model: nn.Module, prepare: Callable[[nn.Module], object] | None = None
                  ) -> nn.Module:
    """An inference copy of ``model`` (eval mode, CPU) with int8 linears; ``model`` unchanged;
    ``prepare`` readies the copy first (a family's: ``generation.seq2seq.int8.quantize_int8``
    splits the cross-attentions). A model of neither family is refused, as is a
    cross-attention left unsplit (its packed rows are sliced: an int8 linear cannot be)."""
    if not isinstance(getattr(model, "config", None), JsonConfig):
        raise TypeError(f"model must be an EncoderDecoder or a DecoderOnlyLM, "
                        f"got {type(model).__name__}")
    if any(isinstance(m, PackedLinear) for m in model.modules()):
        raise UsageError("quantize_int8 takes a model without prepack(): int8 linears "
                         "replace the packed float32 ones")
    if not int8_available():
        raise UsageError("int8 needs PyTorch's fbgemm engine (an x86 CPU build); "
                         f"this build has {torch.backends.quantized.supported_engines}")
    if next(model.parameters()).device.type != "cpu":
        raise UsageError("int8 inference runs on the CPU: load the checkpoint with "
                         "--device cpu")
    plain = copy.deepcopy(model).eval()
    if prepare is not None:
        prepare(plain)
    if any(name.rpartition(".")[2] == "cross_attn" and hasattr(m, "in_proj")
           for name, m in plain.named_modules()):
        raise UsageError("an encoder-decoder's int8 copy splits its cross-attentions: "
                         "generation.seq2seq.int8.quantize_int8")
    qconfig = torch.ao.quantization.per_channel_dynamic_qconfig
    spec = {name: qconfig for name, m in plain.named_modules() if type(m) is nn.Linear}
    with warnings.catch_warnings():  # the API's own deprecation notices, said above
        warnings.simplefilter("ignore", (DeprecationWarning, UserWarning))
        q = torch.ao.quantization.quantize_dynamic(plain, spec, dtype=torch.qint8, inplace=True)
        for name in spec:
            parent, _, child = name.rpartition(".")
            holder = q.get_submodule(parent) if parent else q
            setattr(holder, child, RowScaledInt8(getattr(holder, child)))
    return q


class RowScaledInt8(nn.Module):
    """A dynamic int8 linear whose every input row (a token) is quantized with its own scale.

    Each row x_i is divided by m_i = max|x_i| (at least the smallest normal float, so a zero row
    stays zero) and the batch gets one more row holding -1 and 1, so fbgemm's per-call range is
    always [-1, 1]: row i is rounded to steps of 2/127 of m_i whatever rows share the call, its
    int8 products are exact integer sums, and y_i = m_i (W q(x_i / m_i)) + b. So a line
    translates alike alone and within any batch. A decoding step calls each linear on a few
    hundred rows, where every operation's fixed cost counts: the scale is one reduction, the
    rescale and the bias one ``addcmul`` (measured: benchmarks/log/).
    """

    def __init__(self, linear: torch.ao.nn.quantized.dynamic.Linear):
        super().__init__()
        bias = linear.bias()
        linear.set_weight_bias(linear.weight(), None)  # the bias is added after the rescale
        self.linear = linear
        self.register_buffer("bias", None if bias is None else bias.detach().clone())
        anchor = torch.zeros(1, linear.in_features)
        anchor[0, 0], anchor[0, -1] = -1.0, 1.0  # (d = 1: the range [-1, 0]: still fixed)
        self.register_buffer("anchor", anchor, persistent=False)  # (1, d), fbgemm's range

    def weight(self) -> Tensor:
        """The int8 weight (per output channel scales), as the wrapped linear's."""
        return self.linear.weight()

    def forward(self, x: Tensor) -> Tensor:
        rows = x.reshape(-1, x.size(-1))  # (n, d)
        m = rows.abs().amax(dim=1, keepdim=True).clamp_min_(torch.finfo(x.dtype).tiny)  # (n, 1)
        y = self.linear(torch.cat([self.anchor, rows / m]))[1:]  # (n, out)
        y = y * m if self.bias is None else torch.addcmul(self.bias, y, m)
        return y.reshape(*x.shape[:-1], y.size(-1))


__getattr__ = moved.forward(__name__)  # SplitCrossAttention: moved to generation.seq2seq.int8
