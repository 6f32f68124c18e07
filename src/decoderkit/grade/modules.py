"""Module items: build the learner's class in the child, then judge its outputs against
references built from its own weights; black-box properties when the weights cannot be read.
"""

from __future__ import annotations

import torch

from decoderkit.grade import layout
from decoderkit.grade.items import Inputs, results_for
from decoderkit.grade.judging import Case, Outcome, Tolerance, judge, value_problem
from decoderkit.grade.sandbox import Call


def module_item(seed: str, name: str, init: tuple, forwards: list, build,
                mistakes: tuple[str, ...], tol: Tolerance, perturb: bool = True):
    """An item's ``prepare`` for a module: one call, then ``build(result, inputs)`` gives
    [(label, expected, variants)] from the learner's weights, or raises LayoutError."""
    def prepare(inputs: Inputs):
        specs = tuple(("forward", tuple(inputs.ref(f"{name}{n}_{k}", t) if isinstance(
            t, torch.Tensor) else t for k, t in enumerate(args)))
            for n, (_, args) in enumerate(forwards))
        call = Call(id=f"mod_{name}", name=name, kind="module", init=init, seed=7,
                    forwards=specs, perturb=perturb)
        raw = [args for _, args in forwards]

        def judge_results(results):
            r = results_for(results, [call])[0]
            if "error" in r:
                return Outcome(name, seed, "FAIL", f"{name}{init}: raised {r['error']}")
            try:
                cases = build(r, raw)
            except layout.LayoutError as err:
                return _properties(seed, name, r, raw, str(err))
            judged = [Case(f"{name}{init}, {label}", {"value": value}, expected, variants)
                      for (label, expected, variants), value in zip(cases, r["value"],
                                                                   strict=True)]
            return judge(name, seed, judged, mistakes, tol)

        return [call], judge_results

    return prepare


def _properties(seed: str, name: str, r: dict, raw: list, why: str) -> Outcome:
    """Black-box judging when the weights cannot be read: shape kept, finite output."""
    outcome = Outcome(name, seed, "pass",
                      notes=[f"weights not read ({why}): judged by shape and finiteness only"])
    for args, value in zip(raw, r["value"], strict=True):
        problem = value_problem(value, tuple(args[0].shape), None)
        if problem is None and not torch.isfinite(value).all():
            problem = "non-finite values in the output"
        if problem:
            outcome.status, outcome.detail = "FAIL", f"input {tuple(args[0].shape)}: {problem}"
            break
    return outcome
