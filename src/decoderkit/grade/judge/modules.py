"""Module items: build the learner's class in the child, then judge its outputs against
references built from its own weights; black-box properties when the weights cannot be read.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from decoderkit.grade.judge import layout
from decoderkit.grade.judge.items import Inputs, results_for
from decoderkit.grade.judge.judging import Case, Outcome, Tolerance, judge, value_problem
from decoderkit.grade.run.sandbox import Call

POST_NORM_TOL = 1e-4  # post-norm rows: relative singular value of a LayerNorm's output
# (result, raw forward args) -> [(label, expected, variants)] per forward, or LayoutError
Cases = Callable[[dict, list], list]
Properties = Callable[[Outcome, list, list], Outcome]  # (outcome, raw args, values) -> verdict


@dataclass(frozen=True)
class Build:
    """One construction of the learner's class and the forwards run on it."""

    init: tuple  # constructor arguments: literals, or {"config": class, "fields": {...}}
    forwards: tuple  # (label, args) per forward; args: tensors, literals, {"sublayer": key}
    seed: int  # torch.manual_seed before construction, and the weights' perturbation
    label: str = ""  # how the report names the construction; "" = the item's name + init


def builds(inits: list[tuple], forwards: list, seed: int = 7) -> tuple[Build, ...]:
    """One build per constructor-argument tuple, each running ``forwards``, seeds 7, 8, ..."""
    return tuple(Build(init, tuple(forwards), seed + n) for n, init in enumerate(inits))


def _same(value):
    return value


@dataclass(frozen=True)
class ModuleItem:
    """How a module item is built in the child and judged."""

    seed: str  # the item's seed
    name: str  # the learner's class
    builds: tuple[Build, ...]  # every one judged, or (alternatives) the first that builds
    cases: Cases  # the references from the learner's weights
    mistakes: tuple[str, ...]  # catalogue names its variants are tried for
    tol: Tolerance
    perturb: bool = True  # seeded random weights (False: the module's own init)
    properties: Properties | None = None  # when its weights cannot be read (None: shape_and_finite)
    alternatives: bool = False  # the builds are alternative layouts: the first that builds is
    #                             judged (nanoGPT's GPTConfig, then the course's ints)
    output: Callable = _same  # the judged value of one forward ((logits, loss) -> logits)


def module_item(m: ModuleItem):
    """An item's ``prepare`` for a module: one call per build, each running its forwards;
    judged exactly against ``m.cases`` from the learner's weights, or by ``m.properties``
    when ``cases`` raises ``layout.LayoutError``."""
    def prepare(inputs: Inputs):
        calls = [Call(id=f"mod_{m.name}{b}", name=m.name, kind="module", init=build.init,
                      seed=build.seed, perturb=m.perturb, forwards=tuple(
                          ("forward", tuple(inputs.ref(f"{m.name}{b}.{n}_{k}", t)
                                            if isinstance(t, torch.Tensor) else t
                                            for k, t in enumerate(args)))
                          for n, (_, args) in enumerate(build.forwards)))
                 for b, build in enumerate(m.builds)]
        return calls, lambda results: _judge_builds(m, calls, results_for(results, calls))

    return prepare


def _judge_builds(m: ModuleItem, calls: list[Call], got: list[dict]) -> Outcome:
    """Every build's cases judged together (or the first alternative that built)."""
    pairs = list(zip(m.builds, calls, got, strict=True))
    if m.alternatives:
        built = [p for p in pairs if "error" not in p[2]]
        if not built:  # the first error of a build the file could attempt
            tried = [r for r in got if "undefined" not in r] or got
            return Outcome(m.name, m.seed, "FAIL", tried[0]["error"])
        pairs = built[:1]
    judged = []
    for build, call, r in pairs:
        what = build.label or f"{m.name}{build.init}"
        if "error" in r:
            return Outcome(m.name, m.seed, "FAIL", f"{what}: {r['error']}")
        raw = [args for _, args in build.forwards]
        values = [m.output(v) for v in r["value"]]
        try:
            cases = m.cases(r, raw)
        except layout.LayoutError as err:
            outcome = Outcome(m.name, m.seed, "pass", notes=[
                f"weights not read ({err}): judged by black-box properties only"])
            return (m.properties or shape_and_finite)(outcome, raw, values)
        what += f" (weights seed {call.seed}" + (", eval mode)" if m.perturb
                                                 else ", its own init, eval mode)")
        judged += [Case(f"{what}, {label}{_dtype(args)}", {"value": value}, expected, variants)
                   for (label, expected, variants), value, args in zip(cases, values, raw,
                                                                        strict=True)]
    return judge(m.name, m.seed, judged, m.mistakes, m.tol)


def shape_and_finite(outcome: Outcome, raw: list, values: list) -> Outcome:
    """Black-box: every output has its input's shape and is finite."""
    for args, value in zip(raw, values, strict=True):
        problem = value_problem(value, tuple(args[0].shape), None)
        if problem is None and not torch.isfinite(value).all():
            problem = "non-finite values in the output"
        if problem:
            outcome.status, outcome.detail = "FAIL", f"input {tuple(args[0].shape)}: {problem}"
            break
    return outcome


def causal_properties(outcome: Outcome, raw: list, values: list) -> Outcome:
    """Black-box: shape kept, finite, earlier rows blind to a later change, batch rows
    independent (the probes are the last two forwards, after the first one)."""
    for args, value in zip(raw, values, strict=True):
        if not isinstance(value, torch.Tensor) or not torch.isfinite(value).all() or \
                value.shape[:2] != args[0].shape[:2]:
            outcome.status = "FAIL"
            outcome.detail = f"input {tuple(args[0].shape)}: wrong shape or non-finite output"
            return outcome
    main, later, other = values[0], values[-2], values[-1]
    if not torch.allclose(main[:, :-1], later[:, :-1], atol=1e-5):
        outcome.status, outcome.detail = "FAIL", ("not causal: changing the last position "
                                                  "changed earlier outputs")
    elif not torch.allclose(main[:1], other[:1], atol=1e-5):
        outcome.status, outcome.detail = "FAIL", ("batch rows are not independent: changing "
                                                  "row 1 changed row 0")
    return outcome


def post_norm_properties(outcome: Outcome, raw: list, values: list) -> Outcome:
    """``causal_properties``, and post-norm's own: the output is LN(.) = gamma * n + beta with
    every n of mean 0, so all output rows y satisfy sum_j (y_j - beta_j) / gamma_j = 0: the
    rows, with a column of ones, have a null vector whatever gamma and beta are."""
    outcome = causal_properties(outcome, raw, values)
    if outcome.status == "FAIL":
        return outcome
    rows = torch.cat([v.double().reshape(-1, v.size(-1)) for v in values])  # (K, d)
    if rows.size(0) < rows.size(1) + 2:  # too few rows to tell
        return outcome
    s = torch.linalg.svdvals(torch.cat([rows, torch.ones_like(rows[:, :1])], 1))  # (d + 1,)
    ratio = float(s[-1] / s[0])
    if ratio > POST_NORM_TOL:
        outcome.status, outcome.detail = "FAIL", (
            "the output rows do not come from a final LayerNorm: post-norm ends with "
            "LN(x + F(x)), whose rows (less beta, over gamma) all have mean 0; yours do not lie "
            f"on one such hyperplane (smallest / largest singular value {ratio:.2g})")
    return outcome


def _dtype(args) -> str:
    """', float32' for the first floating tensor argument, for the case label."""
    t = next((a for a in args if isinstance(a, torch.Tensor) and a.is_floating_point()), None)
    return "" if t is None else f", {str(t.dtype).replace('torch.', '')}"

