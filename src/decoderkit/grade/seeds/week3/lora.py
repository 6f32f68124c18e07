"""Week 3's LoRA items (Hu et al. 2021, PEFT's adapter layer): the adapted linear's forward
(``lora_linear``: its base frozen, so the weight and bias, passed as tensors that want a
gradient like a model's Parameters, get none; A and B do), the merge into the base
(``lora_merge``) and the initialisation that makes step 0 the base (``lora_init``), each
judged against ``nn.lora``'s formula in float64.

Legend: r rank, s = alpha / r, A (r, in), B (out, r).
"""

from __future__ import annotations

import math

import torch

from decoderkit.grade.judge.items import Inputs, Item, generator, randn, results_for
from decoderkit.grade.judge.judging import Case, Outcome, Tolerance, judge
from decoderkit.grade.run.sandbox import Call
from decoderkit.grade.seeds.week3.config import SEED
from decoderkit.nn.lora import lora_scale

TOL = Tolerance(atol=1e-8, rtol=1e-8)
SCALE_MISTAKES = ("lora_scale_forgotten", "lora_scale_alpha_times_r")
SCALES = {None: lambda alpha, r: lora_scale(alpha, r), "lora_scale_forgotten": lambda a, r: 1.0,
          "lora_scale_alpha_times_r": lambda alpha, r: alpha * r}
CASES = ((2, 5, 6, 8, 2, 16.0, 1), (1, 3, 4, 4, 4, 8.0, 2), (3, 2, 8, 5, 1, 1.0, 3))
# (B, T, in, out, r, alpha, seed)


def _tensors(case):
    B, T, d_in, d_out, r, alpha, seed = case
    g = generator(300 + seed)
    return (randn(g, B, T, d_in), randn(g, d_out, d_in), randn(g, d_out), randn(g, r, d_in),
            randn(g, d_out, r)), alpha


def linear_reference(x, w, b, a, bb, alpha, mistake=None):
    """x W^T + b + s (x A^T) B^T with ``mistake``'s scale."""
    return x @ w.T + b + SCALES[mistake](alpha, a.shape[0]) * (x @ a.T) @ bb.T


def merge_reference(w, a, bb, alpha, mistake=None):
    """W + s B A with ``mistake``'s scale."""
    return w + SCALES[mistake](alpha, a.shape[0]) * bb @ a


def _function_item(name: str, tag: str, pick, reference, mistakes, after=None,
                   grads: tuple[int, ...] = ()):
    """A function item over ``CASES``: ``pick(tensors)`` the tensors passed, then alpha; those
    at ``grads`` want a gradient (the child reports which the result's sum reaches)."""
    def prepare(inputs: Inputs):
        cases = [(f"case {i}", pick(_tensors(c)[0]), c[5]) for i, c in enumerate(CASES)]
        calls = [Call(id=f"{tag}{i}", name=name, kind="call",
                      args=(*(inputs.ref(f"{tag}{i}_{j}", t) | ({"grad": True} if j in grads
                                                                 else {})
                              for j, t in enumerate(ts)),
                            {"v": alpha}))
                 for i, (_, ts, alpha) in enumerate(cases)]

        def judge_results(results):
            got = results_for(results, calls)
            judged = [Case(label, r, reference(*ts, alpha), lambda m, ts=ts, alpha=alpha: [
                reference(*ts, alpha, m)]) for (label, ts, alpha), r in zip(cases, got,
                                                                            strict=True)]
            outcome = judge(name, SEED, judged, mistakes, TOL)
            return after(outcome, got) if after else outcome

        return calls, judge_results
    return prepare


BASE = {1: "weight", 2: "bias"}  # lora_linear's frozen arguments, by position


def base_frozen(outcome: Outcome, got: list[dict]) -> Outcome:
    """A forward whose result sends a gradient to the base's weight or bias (the base left
    trainable) fails naming it, its value right or not."""
    for i, r in enumerate(got):
        hit = [BASE[int(k.rsplit("_", 1)[1])] for k in r.get("gradients", [])
               if int(k.rsplit("_", 1)[1]) in BASE]
        if hit and outcome.status == "pass":
            return Outcome(outcome.item, outcome.seed, "FAIL", f"case {i}: a gradient reaches "
                           f"the base's {' and '.join(hit)}: it is left trainable (LoRA freezes "
                           "it: detach it, as requires_grad False does)",
                           [("lora_base_trainable", 0.0)], outcome.notes)
    return outcome


def merged_in_place(outcome: Outcome, got: list[dict]) -> Outcome:
    """A merge that changed W (its first argument) in place merges again when called again."""
    if any(r.get("mutated") for r in got) and not outcome.diagnoses:
        outcome.diagnoses = [("lora_merged_twice", 0.0)]
    return outcome


def init_judge(got: list[dict], shapes: list[tuple[int, int, int]]) -> Outcome:
    """(A, B) of each call: A (r, in) non-zero within Kaiming-uniform's bound 1 / sqrt(in),
    B (out, r) zeros."""
    outcome = Outcome("lora_init", SEED, "pass")
    for r, (d_in, d_out, rank) in zip(got, shapes, strict=True):
        value = r.get("value")
        label = f"lora_init({d_in}, {d_out}, {rank})"
        if "error" in r:
            return Outcome("lora_init", SEED, "FAIL", f"{label}: {r['error']}")
        if not (isinstance(value, list) and len(value) == 2 and all(
                isinstance(t, torch.Tensor) for t in value)):
            return Outcome("lora_init", SEED, "FAIL", f"{label}: expected (A, B), two tensors")
        a, b = value
        if tuple(a.shape) != (rank, d_in) or tuple(b.shape) != (d_out, rank):
            return Outcome("lora_init", SEED, "FAIL", f"{label}: A {tuple(a.shape)}, B "
                           f"{tuple(b.shape)}; expected A {(rank, d_in)}, B {(d_out, rank)}")
        if b.abs().max() > 0 or not a.abs().max() > 0:
            return Outcome("lora_init", SEED, "FAIL", f"{label}: B A is not zero at step 0 "
                           f"(max |A| {a.abs().max():.3g}, max |B| {b.abs().max():.3g})",
                           [("lora_b_not_zero", 0.0)])
        if a.abs().max() > 1 / math.sqrt(d_in) + 1e-12:
            return Outcome("lora_init", SEED, "FAIL", f"{label}: max |A| {a.abs().max():.3g} "
                           f"is past Kaiming-uniform's bound 1 / sqrt(in) = "
                           f"{1 / math.sqrt(d_in):.3g}")
    return outcome


def init_prepare(inputs: Inputs):
    shapes = [(c[2], c[3], c[4]) for c in CASES]
    calls = [Call(id=f"li{i}", name="lora_init", kind="call",
                  args=tuple({"v": n} for n in shape)) for i, shape in enumerate(shapes)]
    return calls, lambda results: init_judge(results_for(results, calls), shapes)


ITEMS = (
    Item("lora_linear", SEED, "lora_linear(x, weight, bias, lora_A, lora_B, alpha) -> (B, T, "
         "out)", "a linear with its low-rank update: x W^T + b + (alpha / r) (x A^T) B^T, r = "
         "lora_A.shape[0]; the base frozen (no gradient reaches weight or bias)",
         "exact (float64) against nn.lora's formula; gradients to A and B only",
         (*SCALE_MISTAKES, "lora_base_trainable"),
         _function_item("lora_linear", "ll", lambda t: t, linear_reference, SCALE_MISTAKES,
                        base_frozen, grads=(1, 2, 3, 4))),
    Item("lora_merge", SEED, "lora_merge(weight, lora_A, lora_B, alpha) -> (out, in)",
         "the merged weight W + (alpha / r) B A as a new tensor (weight left unchanged)",
         "exact (float64); the weight must not change", (*SCALE_MISTAKES, "lora_merged_twice"),
         _function_item("lora_merge", "lm", lambda t: (t[1], t[3], t[4]), merge_reference,
                        SCALE_MISTAKES, merged_in_place)),
    Item("lora_init", SEED, "lora_init(in_features, out_features, r) -> (A, B)",
         "PEFT's initialisation: A (r, in) Kaiming-uniform (a = sqrt(5)), B (out, r) zeros",
         "A within Kaiming-uniform's bound and not zero, B exactly zero", ("lora_b_not_zero",),
         init_prepare),
)
