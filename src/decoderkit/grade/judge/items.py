"""What an item is (a name the learner's file may define, its seed, signature and spec, and
how it is judged: ``prepare`` plans the child's calls and returns the judge for their results)
and what a seed is (its items, and how a file of that seed is graded). The registry of every
seed is ``decoderkit.grade.seeds``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from decoderkit.grade.judge.judging import Outcome
from decoderkit.grade.run.sandbox import Call

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


@dataclass(frozen=True)
class Seed:
    """One seed of the course (a text, or a week): what ``--exercise NAME`` grades."""

    name: str  # the --exercise value, and the ``seed`` of each of its items ("002", "w3")
    title: str  # one line: what its exercises build (shown by --list)
    items: tuple[Item, ...]  # in the order they are reported
    exclusive: str | None = None  # set: a file defining one of its items is judged on them
    #                               only (unless --exercise is given); the report's note
    companions: tuple[str, ...] = ()  # classes grade(obj) also sends from the notebook (a
    #                                    config its modules are built from: "GPTConfig")


def check_registry(seeds: tuple[Seed, ...]) -> tuple[Seed, ...]:
    """``seeds`` if every seed name and item name is used once and every item carries its
    seed's name; a ValueError naming the clash otherwise (a bug in a seed package)."""
    names, items = [s.name for s in seeds], [i.name for s in seeds for i in s.items]
    for kind, values in (("seed", names), ("item", items)):
        twice = sorted({v for v in values if values.count(v) > 1})
        if twice:
            raise ValueError(f"{kind} name(s) {', '.join(twice)} registered twice")
    for seed in seeds:
        wrong = [i.name for i in seed.items if i.seed != seed.name]
        if wrong:
            raise ValueError(f"seed {seed.name}'s items {', '.join(wrong)} say another seed")
    return seeds


def generator(seed: int) -> torch.Generator:
    """A seeded CPU generator: every input of every case is reproducible from its seed."""
    return torch.Generator().manual_seed(seed)


def randn(gen: torch.Generator, *shape: int, dtype: torch.dtype = torch.float64) -> Tensor:
    return torch.randn(*shape, generator=gen, dtype=torch.float64).to(dtype)


def results_for(results: dict[str, dict], calls: list[Call]) -> list[dict]:
    """The child's result for each call in order ({'error': ...} when it never reported)."""
    return [results.get(c.id, {"error": "not run (the child process stopped before this call)"})
            for c in calls]
