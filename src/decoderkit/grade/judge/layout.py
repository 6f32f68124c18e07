"""Reading a learner module's weights from what the child sent back: its state dict (in
registration order) and the class of every submodule. A layout is recognised by classes
and shapes, not by attribute names, so ``self.ln1`` and ``self.norm1`` read the same.
"""

from __future__ import annotations

from torch import Tensor

from decoderkit.grade.reference.blocks import Projections


class LayoutError(ValueError):
    """The module's weights are not arranged as the lesson's (judged by properties instead)."""


def modules_of(result: dict, cls: str, under: str = "") -> list[str]:
    """Names of the submodules of class ``cls`` (registration order), below ``under``."""
    return [name for name, kind, _ in result["layout"]
            if kind == cls and name.startswith(under)]


def attrs_of(result: dict, name: str) -> dict:
    return next(a for n, _, a in result["layout"] if n == name)


def _get(state: dict, key: str) -> Tensor:
    if key not in state:
        raise LayoutError(f"no {key} in the state dict")
    return state[key].double()


def _bias(state: dict, key: str) -> Tensor | None:
    return state[key].double() if key in state else None


def vectors(state: dict, size: int, under: str = "") -> list[Tensor]:
    """The (size,) float tensors below ``under``, in order (a LayerNorm's gamma, beta)."""
    return [v.double() for k, v in state.items()
            if k.startswith(under) and v.dim() == 1 and v.numel() == size
            and v.dtype.is_floating_point]


def norm_pair(state: dict, size: int, under: str = "") -> tuple[Tensor, Tensor]:
    """(gamma, beta) of a norm below ``under``: exactly two (size,) tensors."""
    found = vectors(state, size, under)
    if len(found) != 2:
        raise LayoutError(f"expected a scale and a shift of size {size} under "
                          f"'{under or '(module)'}', found {len(found)} such tensors")
    return found[0], found[1]


def linear(state: dict, name: str) -> tuple[Tensor, Tensor | None]:
    """(weight (out, in), bias or None) of the nn.Linear called ``name``."""
    prefix = f"{name}." if name else ""
    return _get(state, f"{prefix}weight"), _bias(state, f"{prefix}bias")


def mha_projections(state: dict, name: str, heads: int) -> Projections:
    """The q, k, v, output projections of an nn.MultiheadAttention called ``name``."""
    w = _get(state, f"{name}.in_proj_weight")
    b = _bias(state, f"{name}.in_proj_bias")
    wq, wk, wv = w.chunk(3)
    bq, bk, bv = (None, None, None) if b is None else b.chunk(3)
    wo, bo = linear(state, f"{name}.out_proj")
    return Projections(wq, bq, wk, bk, wv, bv, wo, bo, heads)


def linear_projections(state: dict, names: list[str], heads: int) -> Projections:
    """q, k, v, output projections from four nn.Linear (the Annotated Transformer's list)."""
    if len(names) != 4:
        raise LayoutError(f"expected four nn.Linear (q, k, v, output), found {len(names)}")
    (wq, bq), (wk, bk), (wv, bv), (wo, bo) = (linear(state, n) for n in names)
    return Projections(wq, bq, wk, bk, wv, bv, wo, bo, heads)
