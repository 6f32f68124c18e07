"""Module items: build the learner's class in the child, then judge its outputs against
references built from its own weights; black-box properties when the weights cannot be read.
"""

from __future__ import annotations

import torch

from decoderkit.grade import layout
from decoderkit.grade.items import Inputs, results_for
from decoderkit.grade.judging import Case, Outcome, Tolerance, judge, value_problem
from decoderkit.grade.sandbox import Call

POST_NORM_TOL = 1e-4  # post-norm rows: relative singular value of a LayerNorm's output


def module_item(seed: str, name: str, inits: list[tuple], forwards: list, build,
                mistakes: tuple[str, ...], tol: Tolerance, perturb: bool = True,
                properties=None):
    """An item's ``prepare`` for a module: one call per constructor-argument tuple in
    ``inits``, each running ``forwards``; ``build(result, inputs)`` gives
    [(label, expected, variants)] per forward from the learner's weights, or raises
    LayoutError; then ``properties(outcome, inputs, outputs)`` judges instead (default:
    shape and finiteness)."""
    def prepare(inputs: Inputs):
        specs = tuple(("forward", tuple(inputs.ref(f"{name}{n}_{k}", t) if isinstance(
            t, torch.Tensor) else t for k, t in enumerate(args)))
            for n, (_, args) in enumerate(forwards))
        calls = [Call(id=f"mod_{name}{n}", name=name, kind="module", init=init, seed=7 + n,
                      forwards=specs, perturb=perturb) for n, init in enumerate(inits)]
        raw = [args for _, args in forwards]

        def judge_results(results):
            judged = []
            for call, init, r in zip(calls, inits, results_for(results, calls), strict=True):
                if "error" in r:
                    return Outcome(name, seed, "FAIL", f"{name}{init}: {r['error']}")
                try:
                    cases = build(r, raw)
                except layout.LayoutError as err:
                    outcome = Outcome(name, seed, "pass", notes=[
                        f"weights not read ({err}): judged by black-box properties only"])
                    return (properties or shape_and_finite)(outcome, raw, r["value"])
                what = f"{name}{init} (weights seed {call.seed}" + \
                    (", eval mode)" if perturb else ", its own init, eval mode)")
                judged += [Case(f"{what}, {label}{_dtype(args)}", {"value": value}, expected,
                                variants)
                           for (label, expected, variants), value, args in zip(
                               cases, r["value"], raw, strict=True)]
            return judge(name, seed, judged, mistakes, tol)

        return calls, judge_results

    return prepare


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

