"""Linears whose every output row is computed alike whatever rows share the call.

MKL's GEMM (``F.linear``) picks its kernel by the row count: a row's product differs in the
last bits when 8 other rows come along (GEMV alone, blocked GEMM with company), so a request
served beside others would not give the tokens it gives alone. oneDNN's matmul on its blocked
weight layout (what PyTorch's own compiler uses for frozen CPU float32 weights, as
``nn.packing``) keeps the reduction order of a row independent of the row count from
2 rows on (checked by the tests, on the CPU's own instructions and held to AVX2, not promised
by oneDNN's documentation), and is also the faster kernel for 2..64 rows here
(``benchmarks/log/``, LM serving).

``rowwise(model)`` returns an inference copy of a CPU float32 model whose every ``nn.Linear``
is a ``RowwiseLinear`` holding only the reordered weight and the bias; the other modules and
their Parameters are shared with ``model``. A linear whose weight another module also holds
(a head tied to the token embedding) keeps that one dense weight instead of a reordered second
copy (GPT-2 small: 147 MiB saved): oneDNN's matmul on the plain layout is row-invariant too. On
either layout a single row takes another kernel (on an AVX-512 CPU the blocked layout's rounds
differently once the inner size passes 1,024, e.g. GPT-2's 3,072 -> 768), so a lone row is
computed beside a zero row. Drop ``model`` afterwards and its dense linear weights are freed.

oneDNN makes (and keeps, up to 1,024 in its primitive cache) a kernel per row count, and a
server's prefills come in every length: each call is padded with zero rows up to one of a
few row counts (``nn.packing.kernel_rows``: 35 for up to 1,024 rows), which changes
no row's result (the row invariance above).

The feed-forward's activation (swish, GELU: ``nn.ffn.ACTIVATIONS``) is elementwise over
the flattened rows, and PyTorch's vectorized loop computes its last elements past a multiple
of the vector width (32 floats on AVX-512) by another path, which rounds differently: with a
width of 48, a row's last 16 activations differ in the last bit when another row follows it.
The copy computes each activation over rows padded to a multiple of ``ACTIVATION_WIDTH``
(``RowInvariant``), so no row ever holds a tail; widths already a multiple take no copy.

These are model pieces: they run inside the model's forward, so they live in ``nn`` (a
request's walk below ``generation`` enters ``nn`` alone, tests/serve/lm/test_walk.py);
``generation.lm.rowwise.for_inference`` picks this copy for decoding.
"""

from __future__ import annotations

import copy
from collections import Counter

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from decoderkit.nn.ffn import PositionwiseFeedForward
from decoderkit.nn.packing import Prepacked, packing_available, padded_linear

ACTIVATION_WIDTH = 64  # a multiple of every vector loop's step (2 x 16 floats on AVX-512)


class RowInvariant:
    """``activation`` (elementwise) computed on rows padded with zeros to a multiple of
    ``ACTIVATION_WIDTH``: x (..., f) -> (..., f), each row alike whatever rows follow it."""

    def __init__(self, activation):
        self.activation = activation

    def __call__(self, x: Tensor) -> Tensor:
        width = x.shape[-1]
        pad = -width % ACTIVATION_WIDTH
        if not pad:
            return self.activation(x)
        return self.activation(F.pad(x, (0, pad)))[..., :width]


class RowwiseLinear(nn.Module, Prepacked):
    """y = x W^T + b through oneDNN on a prepacked W (or, ``shared``, on ``linear``'s own dense
    W, still held by the module it is tied to); inference only."""

    def __init__(self, linear: nn.Linear, shared: bool = False):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight = linear.weight if shared else None  # the tied Parameter itself
        with torch.no_grad():
            self.register_buffer("packed", None if shared else
                                 torch.ops.mkldnn._reorder_linear_weight(linear.weight.detach()),
                                 persistent=False)
        self.bias = None if linear.bias is None else linear.bias.detach()

    def forward(self, x: Tensor) -> Tensor:
        """x (..., in) float32 -> (..., out)."""
        if torch.is_grad_enabled():
            raise RuntimeError("RowwiseLinear is inference-only: run under torch.no_grad() "
                               "or torch.inference_mode()")
        weight = self.weight.detach() if self.packed is None else self.packed
        return padded_linear(x, weight, self.bias, self.in_features)  # a lone row beside a 0


def rowwise_available(model: nn.Module) -> bool:
    """True where ``rowwise`` applies: oneDNN present, the model on the CPU in float32."""
    p = next(model.parameters(), None)
    return packing_available() and p is not None and p.device.type == "cpu" \
        and p.dtype == torch.float32


def rowwise(model: nn.Module) -> nn.Module:
    """An eval-mode copy of ``model`` whose linears are ``RowwiseLinear``s and whose
    feed-forward activations are ``RowInvariant``, sharing every other Parameter and buffer;
    ``model`` itself where ``rowwise_available`` is False (its rows may then differ from alone
    by rounding)."""
    if not rowwise_available(model):
        return model
    memo = {id(t): t for t in (*model.parameters(), *model.buffers())}  # shared, not copied
    twin = copy.deepcopy(model, memo)
    holders = Counter(id(p) for m in twin.modules() for p in m.parameters(recurse=False))
    for module in list(twin.modules()):
        if isinstance(module, PositionwiseFeedForward):  # the twin's own, not model's
            module.activation = RowInvariant(module.activation)
        for name, child in list(module.named_children()):
            if type(child) is nn.Linear:
                setattr(module, name, RowwiseLinear(child, holders[id(child.weight)] > 1))
    return twin.eval()
