"""Reading a learner module's weights from what the child sent back: its state dict (in
registration order) and the class of every submodule. A layout is recognised by classes
and shapes, not by attribute names, so ``self.ln1`` and ``self.norm1`` read the same.
"""

from __future__ import annotations

import torch
from torch import Tensor

from decoderkit.grade.blocks import BlockWeights, Projections


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


def decoder_block(result: dict, under: str, d: int) -> tuple[BlockWeights, float]:
    """Seed 004's block below ``under``: two nn.MultiheadAttention (self, then cross), an FFN
    of two nn.Linear, three nn.LayerNorm, in registration order. -> (weights, LN eps)."""
    state = {k: v for k, v in result["state"].items() if k.startswith(under)}
    mhas, lins = modules_of(result, "MultiheadAttention", under), modules_of(result, "Linear",
                                                                             under)
    norms = modules_of(result, "LayerNorm", under)
    if len(mhas) != 2 or len(lins) != 2 or len(norms) != 3:
        raise LayoutError(f"expected 2 nn.MultiheadAttention, 2 nn.Linear and 3 nn.LayerNorm, "
                          f"found {len(mhas)}, {len(lins)} and {len(norms)}")
    heads = [attrs_of(result, m).get("num_heads") for m in mhas]
    if any(not attrs_of(result, m).get("batch_first", False) for m in mhas):
        raise LayoutError("nn.MultiheadAttention without batch_first=True")
    (w1, b1), (w2, b2) = (linear(state, n) for n in lins)
    if w1.shape[1] != d:
        raise LayoutError(f"the first nn.Linear maps {w1.shape[1]} features, not d={d}")
    zero = torch.zeros
    weights = BlockWeights(
        norms=tuple(norm_pair(state, d, f"{n}.") for n in norms),
        w1=w1.T, b1=zero(w1.shape[0], dtype=torch.float64) if b1 is None else b1,
        w2=w2.T, b2=zero(d, dtype=torch.float64) if b2 is None else b2,
        self_attn=mha_projections(state, mhas[0], heads[0]),
        cross_attn=mha_projections(state, mhas[1], heads[1]))
    return weights, float(attrs_of(result, norms[0]).get("eps", 1e-5))
