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

The cross-attention's packed ``in_proj`` is sliced, not called (query rows every step,
key/value rows once per source), which a quantized module cannot serve: the copy's
cross-attentions are ``SplitCrossAttention``s, their query and key/value rows two int8 linears.
(Left float32, its query product took MKL's GEMV alone and its GEMM in a batch, and a line's
score moved in the last bits with its companions.)

A ``DecoderOnlyLM`` has no cross-attention: every linear is int8. Its tied head gets its own
int8 copy of the embedding matrix (the embedding lookup stays float32), so the copy holds the
d V head weights twice (once float32, once int8); the float model keeps one shared matrix.
"""

from __future__ import annotations

import copy
import warnings

import torch
from torch import Tensor, nn

from decoderkit.base.errors import UsageError
from decoderkit.generation.packing import PackedLinear
from decoderkit.nn.attention import MultiHeadAttention
from decoderkit.nn.layers import DecoderLayer
from decoderkit.nn.lm.model import DecoderOnlyLM
from decoderkit.nn.seq2seq.model import EncoderDecoder


def int8_available() -> bool:
    """True if this PyTorch build has fbgemm's int8 kernels (x86 CPUs)."""
    return "fbgemm" in torch.backends.quantized.supported_engines


def quantize_int8(model: EncoderDecoder | DecoderOnlyLM) -> EncoderDecoder | DecoderOnlyLM:
    """An inference copy of ``model`` (eval mode, CPU) with int8 linears; ``model`` unchanged."""
    if not isinstance(model, (EncoderDecoder, DecoderOnlyLM)):
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
    for m in plain.modules():
        if isinstance(m, DecoderLayer):
            m.cross_attn = SplitCrossAttention.split(m.cross_attn)
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
