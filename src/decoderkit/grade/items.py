"""What an item is: a name the learner's file may define, its seed, signature and spec, and
how it is judged (``prepare`` plans the child's calls and returns the judge for their results).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from decoderkit.grade.judging import Outcome
from decoderkit.grade.sandbox import Call

SEEDS = ("000", "001", "002", "004", "w3")  # w3: Week 3, the decoder-only model
Judge = Callable[[dict[str, dict]], Outcome]  # call id -> the child's result -> verdict


class Inputs:
    """The tensors sent to the child, each under a unique key; ``ref`` is its argument spec."""

    def __init__(self):
        self.tensors: dict[str, Tensor] = {}

    def ref(self, key: str, tensor: Tensor) -> dict:
        if key in self.tensors:
            raise ValueError(f"input key {key!r} used twice")
        self.tensors[key] = tensor.detach().clone()
        return {"t": key}


@dataclass(frozen=True)
class Item:
    """One gradable name of one seed."""

    name: str  # the function or class name the learner's file defines
    seed: str  # the seed that specifies it
    signature: str  # as the seed writes it
    spec: str  # one line: what it must compute, in the seed's convention
    judged: str  # how it is judged: "exact" (against the reference) or "properties"
    mistakes: tuple[str, ...]  # catalogue names it can be diagnosed with
    prepare: Callable[[Inputs], tuple[list[Call], Judge]]  # plan + judge


def generator(seed: int) -> torch.Generator:
    """A seeded CPU generator: every input of every case is reproducible from its seed."""
    return torch.Generator().manual_seed(seed)


def randn(gen: torch.Generator, *shape: int, dtype: torch.dtype = torch.float64) -> Tensor:
    return torch.randn(*shape, generator=gen, dtype=torch.float64).to(dtype)


def results_for(results: dict[str, dict], calls: list[Call]) -> list[dict]:
    """The child's result for each call in order ({'error': ...} when it never reported)."""
    return [results.get(c.id, {"error": "not run (the child process stopped before this call)"})
            for c in calls]
