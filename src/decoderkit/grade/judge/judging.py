"""Judging one item's outputs: against the reference case by case, then against every
applicable mistake on the same inputs (the diagnosis), with the verdict a learner reads.

Errors are measured as ``|got - expected| / (atol + rtol |expected|)``: at most 1 passes.
NaN where the reference has NaN counts as equal (a mistake variant can produce NaN exactly
as the learner's code does); NaN anywhere else never matches.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from decoderkit.grade.judge.catalogue import BY_NAME


@dataclass(frozen=True)
class Tolerance:
    """|got - expected| <= atol + rtol |expected| elementwise."""

    atol: float
    rtol: float


@dataclass
class Outcome:
    """The verdict on one item of one file."""

    item: str  # the learner-facing name, e.g. "transformer_decoder"
    seed: str  # the item's seed (its name in the registry, seeds.SEEDS)
    status: str  # "pass", "FAIL" or "not found"
    detail: str = ""  # the first failing case: what was run, max |diff| and where
    diagnoses: list[tuple[str, float]] = field(default_factory=list)  # (mistake, error), best first
    notes: list[str] = field(default_factory=list)  # differences that are not failures

    def to_json(self) -> dict:
        return {"item": self.item, "seed": self.seed, "status": self.status,
                "detail": self.detail, "notes": self.notes,
                "diagnoses": [{"mistake": n, "title": BY_NAME[n].title, "error": e,
                               "explanation": BY_NAME[n].explanation,
                               "formula": BY_NAME[n].formula, "source": BY_NAME[n].source}
                              for n, e in self.diagnoses]}


@dataclass(frozen=True)
class Case:
    """One judged run: its label, the learner's value (or error) and the reference."""

    label: str  # what was run: shapes, dtype, seed
    result: dict  # the child's result for this call
    expected: Tensor  # the reference output, float64
    variants: Callable[[str], list[Tensor]]  # mistake name -> its possible outputs (or none)


def error(got: Tensor, expected: Tensor, tol: Tolerance) -> Tensor:
    """Elementwise normalised error (float64); NaN-on-NaN is 0, any other NaN is inf."""
    got, expected = got.double(), expected.double()
    err = (got - expected).abs() / (tol.atol + tol.rtol * expected.abs())
    both_nan = got.isnan() & expected.isnan()
    err = torch.where(both_nan, torch.zeros_like(err), err)
    return torch.nan_to_num(err, nan=float("inf"), posinf=float("inf"))


def worst(got: Tensor, expected: Tensor, tol: Tolerance) -> tuple[float, str]:
    """(max normalised error, 'max |diff| 3.1e-01 at [2, 5] (yours 0.53, expected 0.21)')."""
    err = error(got, expected, tol)
    if err.numel() == 0:
        return 0.0, "empty"
    idx = tuple(int(i) for i in np.unravel_index(int(err.argmax()), tuple(err.shape)))
    g, e = got.double()[idx].item(), expected.double()[idx].item()
    return err.max().item(), (f"max |diff| {abs(g - e):.2e} at {list(idx)} "
                              f"(yours {g:.6g}, expected {e:.6g})")


def value_problem(value, shape: tuple[int, ...], dtype: torch.dtype | None) -> str | None:
    """Why a returned value cannot be compared: wrong type, shape or dtype; None if fine."""
    if not isinstance(value, Tensor):
        kind = value.get("__type__", "dict") if isinstance(value, dict) else type(value).__name__
        return f"returned {kind}, expected a tensor of shape {tuple(shape)}"
    if tuple(value.shape) != tuple(shape):
        return f"returned shape {tuple(value.shape)}, expected {tuple(shape)}"
    if dtype is not None and value.dtype != dtype:
        return f"returned dtype {value.dtype}, expected {dtype} (the inputs' dtype)"
    return None


def judge(item: str, seed: str, cases: list[Case], mistakes: tuple[str, ...], tol: Tolerance,
          dtypes: list[torch.dtype | None] | None = None) -> Outcome:
    """Pass when every case is within ``tol``; else the first failing case and diagnoses."""
    outcome = Outcome(item, seed, "pass")
    comparable: list[tuple[Case, Tensor]] = []
    for i, case in enumerate(cases):
        dtype = dtypes[i] if dtypes else None
        if "error" in case.result:
            _fail(outcome, f"{case.label}: {case.result['error']}")
            continue
        value = case.result["value"]
        problem = value_problem(value, tuple(case.expected.shape), dtype)
        if problem:
            _fail(outcome, f"{case.label}: {problem}")
            continue
        comparable.append((case, value))
        if case.result.get("mutated"):
            _fail(outcome, f"{case.label}: modified its input(s) {case.result['mutated']} "
                           f"(inputs must be left unchanged)")
        err, where = worst(value, case.expected, tol)
        if err > 1.0:
            nan = " (NaN in your output)" if value.isnan().any() else ""
            _fail(outcome, f"{case.label}: {where}{nan}")
    if outcome.status == "FAIL" and comparable:
        outcome.diagnoses = diagnose(comparable, mistakes, tol)
    return outcome


def diagnose(comparable: list[tuple[Case, Tensor]], mistakes: tuple[str, ...],
             tol: Tolerance) -> list[tuple[str, float]]:
    """Every mistake whose variant reproduces all comparable outputs, best first."""
    found = []
    for name in mistakes:
        errs = []
        for case, value in comparable:
            errs.append(min((error(value, v, tol).max().item() if value.numel() else 0.0
                             for v in case.variants(name) if v.shape == value.shape),
                            default=float("inf")))
        if errs and max(errs) <= 1.0:
            found.append((name, max(errs)))
    return sorted(found, key=lambda pair: pair[1])


def _fail(outcome: Outcome, detail: str) -> None:
    """Record a failure; the first failing case is the one reported."""
    if outcome.status != "FAIL":
        outcome.status, outcome.detail = "FAIL", detail


@dataclass(frozen=True)
class TokenCase:
    """One decode-loop run: the ids it must return and a mistaken loop's ids."""

    label: str  # what was run
    result: dict  # the child's result
    expected: list[int]  # the reference ids
    variants: Callable[[str], list[int]]  # mistake name -> the ids that loop returns
    accepted: tuple[tuple[list[int], str], ...] = ()  # other answers that pass, with a note


def token_list(value) -> list[int] | None:
    """A returned id sequence as a list of ints: a list, a 1-D or (1, L) tensor."""
    if isinstance(value, Tensor) and value.dim() <= 2 and (value.dim() < 2 or value.size(0) == 1):
        if value.dtype.is_floating_point and not torch.equal(value, value.round()):
            return None
        return [int(v) for v in value.reshape(-1)]
    if isinstance(value, list) and all(isinstance(v, (int, float)) or
                                       (isinstance(v, Tensor) and v.numel() == 1)
                                       for v in value):
        return [int(v) for v in value]
    return None


def judge_tokens(item: str, seed: str, cases: list[TokenCase],
                 mistakes: tuple[str, ...]) -> Outcome:
    """Exact id sequences; a diagnosis is a mistake whose loop returns the same ids in
    every case."""
    outcome = Outcome(item, seed, "pass")
    got: list[list[int] | None] = []
    for case in cases:
        if "error" in case.result:
            got.append(None)
            _fail(outcome, f"{case.label}: {case.result['error']}")
            continue
        ids = token_list(case.result["value"])
        got.append(ids)
        if ids is None:
            _fail(outcome, f"{case.label}: returned {type(case.result['value']).__name__}, "
                           f"expected a list or tensor of token ids")
        elif ids != case.expected:
            note = next((n for answer, n in case.accepted if answer == ids), None)
            if note is None:
                _fail(outcome, f"{case.label}: returned {ids}, expected {case.expected}")
            elif note not in outcome.notes:
                outcome.notes.append(note)
    if outcome.status == "FAIL":
        pairs = [(c, ids) for c, ids in zip(cases, got, strict=True) if ids is not None]
        outcome.diagnoses = [(m, 0.0) for m in mistakes
                             if pairs and all(_among(c.variants(m), ids) for c, ids in pairs)]
    return outcome


def _among(variants: list, ids: list[int]) -> bool:
    """A mistake's ids (one list) or its possible ids (a list of lists) include ``ids``."""
    return variants == ids or ids in variants
