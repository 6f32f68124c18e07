"""The seed-002 exercise: one pre-norm decoder block, single head, unbatched, no projections.

Legend: T decoder length, S encoder length, D model width, F feed-forward width.

    H1 = LN(X;  gamma1, beta1);  X1 = X  + softmax(H1 H1^T / sqrt(D) + M) H1   (M: -inf for j > i)
    H2 = LN(X1; gamma2, beta2);  X2 = X1 + softmax(H2 E^T / sqrt(D)) E        (E = enc_out)
    H3 = LN(X2; gamma3, beta3);  out = X2 + ReLU(H3 W1 + b1) W2 + b2
    LN(r) = gamma (r - mean) / sqrt(var + 1e-5) + beta, population variance, per row.

Built from the library's own exact pieces (``attention`` with ``causal_mask``, and
``F.layer_norm``, which is ``LayerNorm``'s arithmetic), so exercise and library share one
mechanism. float16 / bfloat16 inputs are computed in float32 and the result is cast back
(half-precision variance and softmax sums lose digits the formulas do not allow);
float32 and float64 are computed in their own dtype.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from decoderkit.base.errors import UsageError
from decoderkit.nn.attention import attention
from decoderkit.nn.masks import causal_mask

EPS = 1e-5  # inside the square root, as in the exercise
_WIDER = {torch.float16: torch.float32, torch.bfloat16: torch.float32}  # compute dtypes


def transformer_decoder(X: Tensor, enc_out: Tensor, gamma1: Tensor, beta1: Tensor,
                        gamma2: Tensor, beta2: Tensor, gamma3: Tensor, beta3: Tensor,
                        W1: Tensor, b1: Tensor, W2: Tensor, b2: Tensor) -> Tensor:
    """One decoder block of seed 002: X (T, D), enc_out (S, D) -> (T, D).

    gamma*/beta* (D,), W1 (D, F), b1 (F,), W2 (F, D), b2 (D,); all one floating dtype and
    device. Returns X's dtype and device; no input is modified.
    """
    args = dict(X=X, enc_out=enc_out, gamma1=gamma1, beta1=beta1, gamma2=gamma2,
                beta2=beta2, gamma3=gamma3, beta3=beta3, W1=W1, b1=b1, W2=W2, b2=b2)
    _check_inputs(args)
    work = _WIDER.get(X.dtype, X.dtype)
    t = {name: value.to(work) for name, value in args.items()}  # copies only when widening
    D = X.size(1)

    def norm(x: Tensor, i: int) -> Tensor:
        return F.layer_norm(x, (D,), t[f"gamma{i}"], t[f"beta{i}"], eps=EPS)

    x, memory = t["X"], t["enc_out"]
    h1 = norm(x, 1)  # (T, D)
    x1 = x + attention(h1, h1, h1, causal_mask(x.size(0), device=x.device))[0]  # (T, D)
    h2 = norm(x1, 2)
    x2 = x1 + attention(h2, memory, memory)[0]  # (T, S) weights -> (T, D)
    h3 = norm(x2, 3)
    ff = F.relu(h3 @ t["W1"] + t["b1"]) @ t["W2"] + t["b2"]  # (T, F) -> (T, D)
    return (x2 + ff).to(X.dtype)


def _check_inputs(args: dict[str, object]) -> None:
    """TypeError for non-tensors and non-float or mixed dtypes, ValueError for devices/shapes."""
    for name, value in args.items():
        if not isinstance(value, Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(value).__name__}")
        if not value.dtype.is_floating_point:
            raise TypeError(f"{name} must be a floating-point tensor, got dtype {value.dtype}")
    X = args["X"]
    for name, value in args.items():
        if value.dtype != X.dtype:
            raise TypeError(f"{name} must have X's dtype {X.dtype}, got {value.dtype}")
        if value.device != X.device:
            raise UsageError(f"{name} must be on X's device {X.device}, got {value.device}")
    _check_shape("X", X, ("T", "D"), (None, None))
    D = X.size(1)
    _check_shape("enc_out", args["enc_out"], ("S", "D"), (None, D))
    _check_shape("W1", args["W1"], ("D", "F"), (D, None))
    f = args["W1"].size(1)
    for name in ("gamma1", "beta1", "gamma2", "beta2", "gamma3", "beta3", "b2"):
        _check_shape(name, args[name], ("D",), (D,))
    _check_shape("b1", args["b1"], ("F",), (f,))
    _check_shape("W2", args["W2"], ("F", "D"), (f, D))


def _check_shape(name: str, value: Tensor, letters: tuple[str, ...],
                 sizes: tuple[int | None, ...]) -> None:
    """Exact rank, positive sizes, and the known sizes (None = free) -> else ValueError."""
    shape = tuple(value.shape)
    ok = len(shape) == len(sizes) and all(
        n > 0 and (want is None or n == want) for n, want in zip(shape, sizes, strict=True))
    if not ok:
        expected = ", ".join(let if want is None else f"{let}={want}"
                             for let, want in zip(letters, sizes, strict=True))
        raise UsageError(f"{name} must have shape ({expected}) with positive sizes, got {shape}")
