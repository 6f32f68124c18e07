"""Inference-only prepacked linears: each weight reordered once into oneDNN's blocked layout.

y = x W^T + b, the same formula as ``nn.Linear``; only the GEMM differs. On CPUs where the
default float32 GEMM behind ``F.linear`` is slow (measured here: AMD EPYC, MKL) oneDNN's
prepacked kernel is faster for the batched steps of decoding (see ``benchmarks/README.md``).
``prepack(model)`` swaps every ``nn.Linear`` for a ``PackedLinear`` that shares the same
Parameters (the state dict does not change). Whenever the packed kernel does not apply
(gradients enabled, not CPU float32) it calls the exact ``F.linear``. A single row (batch-1
decoding) is a memory-bound GEMV, where MKL reads a wide weight faster in (in, out) layout:
measured here, 1 x 512 -> 8000 took 1.2 ms against 3.0 ms for ``F.linear``, 512 -> 1536 and
512 -> 2048 about 1.8x, while narrow weights (out <= in) were fastest with ``F.linear``. So a
wide layer keeps a transposed copy, made on the first single-row call. A weight changed in
place since packing (an optimiser step, ``load_state_dict``) is repacked.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def packing_available() -> bool:
    """True if this PyTorch build has oneDNN's prepacked linear on this machine."""
    ops = torch.ops.mkldnn
    return (torch.backends.mkldnn.is_available() and hasattr(ops, "_linear_pointwise")
            and hasattr(ops, "_reorder_linear_weight"))


class PackedLinear(nn.Linear):
    """An ``nn.Linear`` whose inference forward uses a prepacked copy of its weight."""

    @classmethod
    def from_linear(cls, linear: nn.Linear) -> PackedLinear:
        """A PackedLinear holding ``linear``'s own weight and bias Parameters (not copies)."""
        packed = cls.__new__(cls)
        nn.Module.__init__(packed)
        packed.in_features, packed.out_features = linear.in_features, linear.out_features
        packed.weight, packed.bias = linear.weight, linear.bias
        packed._packed: Tensor | None = None  # oneDNN's blocked layout, for several rows
        packed._transposed: Tensor | None = None  # W^T (in, out) contiguous, for one row
        packed._packed_version = -1  # weight._version the copies were made from
        return packed

    def forward(self, x: Tensor) -> Tensor:
        """x (..., in) -> x W^T + b (..., out); the fast kernels only without grad, on CPU
        float32, otherwise the exact ``F.linear``."""
        w = self.weight
        if torch.is_grad_enabled() or x.device.type != "cpu" or x.dtype != torch.float32 \
                or w.dtype != torch.float32:
            return F.linear(x, w, self.bias)  # exact fallback
        if self._packed_version != w._version:  # changed in place since packing: redo copies
            self._packed = self._transposed = None
            self._packed_version = w._version
        if x.numel() == x.size(-1):  # a single row: GEMV
            if self.out_features <= self.in_features:
                return F.linear(x, w, self.bias)
            if self._transposed is None:
                self._transposed = w.detach().t().contiguous()  # (in, out)
            row = x.reshape(1, self.in_features)  # (1, in)
            y = row @ self._transposed if self.bias is None else \
                torch.addmm(self.bias, row, self._transposed)  # (1, out)
            return y.view(*x.shape[:-1], self.out_features)
        if self._packed is None:
            self._packed = torch.ops.mkldnn._reorder_linear_weight(w.detach())
        return torch.ops.mkldnn._linear_pointwise(x, self._packed, self.bias, "none", [], "")


def prepack(model: nn.Module) -> nn.Module:
    """Replace every ``nn.Linear`` inside ``model`` by a ``PackedLinear`` (in place).

    Returns ``model``; a no-op where ``packing_available()`` is False.
    """
    if not packing_available():
        return model
    for module in list(model.modules()):
        for name, child in list(module.named_children()):
            if type(child) is nn.Linear:
                setattr(module, name, PackedLinear.from_linear(child))
    return model
