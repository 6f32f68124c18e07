"""A learner's GPT weights, read by classes and shapes (not names): nanoGPT's layout (one
packed (3d, d) ``c_attn``) or the course's (four (d, d) projections), with or without biases,
into ``reference.gpt``'s weight records.
"""

from __future__ import annotations

import torch
from torch import Tensor

from decoderkit.grade.judge.layout import LayoutError, modules_of, vectors
from decoderkit.grade.reference.blocks import Projections
from decoderkit.grade.reference.gpt import GPTW, BlockW


def _norm(state: dict, name: str, d: int) -> tuple[Tensor, Tensor]:
    """(gamma, beta) of the norm module ``name``; no beta (bias=False) reads as zeros."""
    found = vectors(state, d, f"{name}.")
    if len(found) not in (1, 2):
        raise LayoutError(f"expected a scale (and a shift) of size {d} in {name}")
    return found[0], found[1] if len(found) == 2 else torch.zeros(d, dtype=torch.float64)


def _bias(state: dict, key: str, size: int) -> Tensor:
    bias_key = key[:-len("weight")] + "bias"
    return state[bias_key].double() if bias_key in state else torch.zeros(size, dtype=torch.float64)


def attention(state: dict, under: str, d: int, heads: int) -> Projections:
    """q, k, v, output projections below ``under``: packed (c_attn (3d, d) or in_proj), then
    the output; or four (d, d) matrices q, k, v, o."""
    mats = [(k, v.double()) for k, v in state.items() if k.startswith(under)
            and k.endswith("weight") and v.dim() == 2]
    shapes = [tuple(v.shape) for _, v in mats]
    if shapes[:2] == [(3 * d, d), (d, d)]:
        (kp, wp), (ko, wo) = mats[:2]
        (wq, wk, wv), (bq, bk, bv) = wp.chunk(3), _bias(state, kp, 3 * d).chunk(3)
        return Projections(wq, bq, wk, bk, wv, bv, wo, _bias(state, ko, d), heads)
    if shapes[:4] == [(d, d)] * 4:
        w = [(v, _bias(state, k, d)) for k, v in mats[:4]]
        return Projections(*w[0], *w[1], *w[2], *w[3], heads)
    raise LayoutError(f"attention weights not recognised below '{under or '(module)'}' "
                             f"(shapes {shapes[:4]})")


def block(result: dict, under: str, d: int, heads: int) -> BlockW:
    """A block below ``under``: two norms, the attention, then the MLP's two matrices."""
    state = result["state"]
    norms = modules_of(result, "LayerNorm", under)
    if len(norms) < 2:
        raise LayoutError(f"expected two LayerNorms below '{under or '(module)'}'")
    mats = [(k, v.double()) for k, v in state.items() if k.startswith(under)
            and k.endswith("weight") and v.dim() == 2]
    (k1, w1), (k2, w2) = mats[-2:]
    if w1.shape[1] != d or w2.shape != (d, w1.shape[0]):
        raise LayoutError(f"the MLP's matrices have shapes {tuple(w1.shape)}, "
                                 f"{tuple(w2.shape)}")
    return BlockW(_norm(state, norms[0], d), attention(state, under, d, heads),
                  _norm(state, norms[1], d), w1.T, _bias(state, k1, w1.shape[0]), w2.T,
                  _bias(state, k2, d))


def gelu_kind(result: dict) -> str:
    """The GELU the learner's module declares (an nn.GELU's ``approximate``), else erf."""
    kinds = {a.get("approximate") for _, cls, a in result["layout"] if cls == "GELU"}
    return "tanh" if kinds == {"tanh"} else "erf"


def model(result: dict, V: int, L: int, d: int, heads: int) -> GPTW:
    """Token and position tables, the blocks (two norms each), the final norm, the head."""
    state = result["state"]
    tables = [v.double() for v in state.values() if v.dim() == 2 and v.shape[1] == d
              and v.shape[0] in (V, L)]
    wte = next((t for t in tables if t.shape[0] == V), None)
    wpe = next((t for t in tables if t.shape[0] == L), None)
    if wte is None or wpe is None:
        raise LayoutError(f"expected a ({V}, {d}) token table and a ({L}, {d}) "
                                 f"position table")
    norms = modules_of(result, "LayerNorm")
    n = len(norms) // 2
    prefixes = [_common(norms[2 * i], norms[2 * i + 1]) for i in range(n)]
    layers = tuple(block(result, p, d, heads) for p in prefixes)
    ln_f = _norm(state, norms[-1], d) if len(norms) % 2 else None
    return GPTW(wte, wpe, layers, ln_f, [t for t in tables if t.shape[0] == V][-1])


def _common(a: str, b: str) -> str:
    """The parent module both names sit in, with its trailing dot ('' at the top)."""
    parts = []
    for x, y in zip(a.split("."), b.split("."), strict=False):
        if x != y:
            break
        parts.append(x)
    return ".".join(parts) + "." if parts else ""
