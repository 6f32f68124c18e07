"""A model built without its weights, for the weights pipeline (``nn.weights.load_file``) to
fill: ``make(config)`` with its random initialisation skipped (``Unfilled``), so that each
parameter's storage is allocated (``torch.empty``) and left untouched, its memory taken only
when the file's values are written into it; a tied head's own matrix, made and then replaced
by the embedding's, is never touched, so never held. Buffers computed from the config (RoPE's
frequencies, the sinusoid table) and ties are made as ``make`` makes them. Opening a model then
holds the model and a block of one tensor, not a random model beside it.

Not PyTorch's meta device (torchtune's build): its ``normal_`` imports some 800 modules of
PyTorch's Python decompositions (74 MB resident, more than a SmolLM2-135M's head), and each
buffer would have to be made again off it.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

FILLS = (torch.Tensor.normal_, torch.Tensor.uniform_)  # a module's own draws, as methods


class Unfilled(TorchFunctionMode):
    """While active (in this thread): ``torch.nn.init``'s initialisers (normal_, uniform_,
    kaiming_uniform_, zeros_, ...) and a tensor's own random fill leave the tensor as it is."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        initialiser = getattr(func, "__module__", None) == "torch.nn.init" and \
            func.__name__.endswith("_")
        if initialiser or func in FILLS:
            return args[0] if args else kwargs["tensor"]
        return func(*args, **(kwargs or {}))


def skeleton(make: Callable[..., nn.Module], config) -> nn.Module:
    """``make(config)`` with every parameter allocated and not drawn (its values whatever the
    memory held: the caller fills each), ties and computed buffers as ``make`` makes them."""
    with Unfilled():
        return make(config)
