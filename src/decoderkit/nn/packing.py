"""Inference-only prepacked linears: each weight reordered once into a GEMM library's layout.

y = x W^T + b, the same formula as ``nn.Linear``; only the GEMM differs. The two packed
kernels are the ones PyTorch's own compiler uses when it freezes float32 CPU weights:
MKL's packed sgemm (``cblas_sgemm_pack``), whose layout is made for one row count, serves
decoding steps (the same N rows step after step, at most ``MKL_ROWS``); oneDNN's blocked
layout serves everything else (the encoder's B * S rows, a prefix re-run each step). Measured
here (``benchmarks/log/``), MKL's packed GEMM is the faster of the two for few rows, and
neither beat ``F.linear`` (MKL's plain GEMV) on a single row, which therefore stays with it.
``prepack(model)`` swaps every ``nn.Linear`` for a ``PackedLinear`` that shares the same
Parameters (the state dict does not change). Whenever the packed kernels do not apply
(gradients enabled, not CPU float32) it calls the exact ``F.linear``. A weight changed in place
since packing (an optimiser step, ``load_state_dict``) is repacked. ``torch.compile`` packs
frozen weights itself: ``decoderkit.generation.seq2seq.compiled`` takes an unpacked model.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

MKL_ROWS = 256  # inputs with at most this many rows may use MKL's packed GEMM
ROW_STEPS = 4  # oneDNN row counts per doubling past 8 (each call padded up to one of them)


def kernel_rows(rows: int) -> int:
    """The row count oneDNN computes for ``rows`` rows: 2 for 1 (its 1-row kernel differs),
    ``rows`` up to 8, then the next of ``ROW_STEPS`` even steps per doubling (9..16 by 2,
    17..32 by 4, ...: at most a quarter more rows). oneDNN makes and keeps (up to 1,024, its
    primitive cache) a kernel per row count: a long-running server's inputs of every length
    would fill it; padded, inputs of up to 2^k rows make at most 8 + ROW_STEPS (k - 3)
    kernels per weight. Its blocked layout computes each row alike for any row count from 2,
    so zero rows added change no row's result."""
    if rows <= 8:
        return max(rows, 2)
    step = 1 << (rows - 1).bit_length() - 1 - (ROW_STEPS.bit_length() - 1)
    return -(-rows // step) * step


def padded_linear(x: Tensor, weight: Tensor, bias: Tensor | None, in_features: int) -> Tensor:
    """oneDNN's linear of x (..., in) on ``weight`` (its blocked layout, or a dense weight) with
    the rows padded to ``kernel_rows``."""
    rows = x.reshape(-1, in_features)
    n = rows.size(0)
    if kernel_rows(n) > n:
        rows = torch.cat([rows, rows.new_zeros(kernel_rows(n) - n, in_features)])
    y = torch.ops.mkldnn._linear_pointwise(rows, weight, bias, "none", [], "")
    return y[:n].reshape(*x.shape[:-1], y.size(-1))


def packing_available() -> bool:
    """True if this PyTorch build has oneDNN's prepacked linear on this machine."""
    ops = torch.ops.mkldnn
    return (torch.backends.mkldnn.is_available() and hasattr(ops, "_linear_pointwise")
            and hasattr(ops, "_reorder_linear_weight"))


def mkl_packing_available() -> bool:
    """True if this PyTorch build has MKL's packed linear (``torch.ops.mkl._mkl_linear``)."""
    return torch._C.has_mkl and hasattr(torch.ops.mkl, "_mkl_linear")


class Prepacked:
    """A linear holding its weight prepacked for one library's kernel: ``torch.compile``
    cannot freeze it (``generation.compiling`` refuses a model with one)."""


class PackedLinear(nn.Linear, Prepacked):
    """An ``nn.Linear`` whose inference forward uses a prepacked copy of its weight."""

    @classmethod
    def from_linear(cls, linear: nn.Linear) -> PackedLinear:
        """A PackedLinear holding ``linear``'s own weight and bias Parameters (not copies)."""
        packed = cls.__new__(cls)
        nn.Module.__init__(packed)
        packed.in_features, packed.out_features = linear.in_features, linear.out_features
        packed.weight, packed.bias = linear.weight, linear.bias
        packed._dnn: Tensor | None = None  # oneDNN's blocked layout, any row count
        packed._mkl: Tensor | None = None  # MKL's packed layout, for _mkl_rows rows
        packed._mkl_rows = 0  # row count of the previous call (MKL packs on the second)
        packed._packed_version = -1  # weight._version the copies were made from
        return packed

    def forward(self, x: Tensor) -> Tensor:
        """x (..., in) -> x W^T + b (..., out); the packed kernels only without grad, on CPU
        float32, otherwise the exact ``F.linear``."""
        w = self.weight
        if torch.is_grad_enabled() or x.device.type != "cpu" or x.dtype != torch.float32 \
                or w.dtype != torch.float32 or x.numel() <= self.in_features:
            return F.linear(x, w, self.bias)  # exact fallback; one row: F.linear's GEMV
        if self._packed_version != w._version:  # changed in place since packing: redo copies
            self._dnn = self._mkl = None
            self._packed_version = w._version
        rows = x.numel() // self.in_features
        if rows == self._mkl_rows and rows <= MKL_ROWS and mkl_packing_available():
            if self._mkl is None:  # the same rows twice in a row: a decoding loop
                self._mkl = torch.ops.mkl._mkl_reorder_linear_weight(w.detach(), rows)
            return torch.ops.mkl._mkl_linear(x, self._mkl, w, self.bias, rows)
        self._mkl, self._mkl_rows = None, rows
        if self._dnn is None:
            self._dnn = torch.ops.mkldnn._reorder_linear_weight(w.detach())
        return padded_linear(x, self._dnn, self.bias, self.in_features)


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
