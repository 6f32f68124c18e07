"""Week 3's Llama items, the blocks that replaced GPT-2's: rotary positions (``apply_rope``),
RMSNorm (``rms_norm``), the SwiGLU feed-forward (``swiglu``) and grouped-query attention's
head grouping (``repeat_kv``), in Hugging Face's conventions, each judged against nn's own
function (``reference.llama``). ``apply_rope`` is also checked for RoPE's defining property on
the learner's own function: a query's score with a key depends only on their offset.

Legend: B batch, h heads, T positions, d a head's (or the row's) width, F the FFN's width.
"""

from __future__ import annotations

import torch

from decoderkit.grade.judge.items import Inputs, Item, generator, randn, results_for
from decoderkit.grade.judge.judging import Case, Outcome, Tolerance, judge
from decoderkit.grade.reference import llama
from decoderkit.grade.run.sandbox import Call
from decoderkit.grade.seeds.week3.config import SEED

TOL = Tolerance(atol=1e-4, rtol=1e-4)  # nn.rope's angles are float32, as Hugging Face's
EXACT = Tolerance(atol=1e-6, rtol=1e-6)
ROPE_MISTAKES = ("rope_interleaved", "rope_rotation_reversed", "rope_theta_ignored",
                 "rope_frequency")
RMS_MISTAKES = ("rms_mean_subtracted", "rms_eps_outside_root")
SWIGLU_MISTAKES = ("swiglu_gate_up_swapped", "swiglu_gelu_for_silu")
KV_MISTAKES = ("kv_heads_tiled",)
ROPE_CASES = (  # (B, h, T, d, positions, theta, dtype, seed)
    (2, 3, 5, 8, range(5), 10000.0, torch.float64, 1),
    (1, 2, 4, 6, (3, 7, 8, 40), 500000.0, torch.float64, 2),
    (2, 1, 3, 4, (0, 1, 2), 10000.0, torch.float32, 3),
)
OFFSET = ((3, 1), (12, 10))  # (query, key) positions at one offset: the property's check


def _calls(inputs: Inputs, name: str, tag: str, cases: list[tuple]) -> list[Call]:
    """One call of ``name`` per case (label, tensors, literals)."""
    return [Call(id=f"{tag}{n}", name=name, kind="call",
                 args=(*(inputs.ref(f"{tag}{n}_{i}", t) for i, t in enumerate(tensors)),
                       *({"v": v} for v in literals)))
            for n, (_, tensors, literals) in enumerate(cases)]


def _prepare(name: str, tag: str, cases: list[tuple], reference, mistakes: tuple[str, ...],
             tol: Tolerance, after=None):
    """The plan and judge of a function item whose case is (label, tensors, literals):
    ``reference(*tensors, *literals, mistake)``; ``after`` may add to the outcome."""
    def prepare(inputs: Inputs):
        calls = _calls(inputs, name, tag, cases)

        def judge_results(results):
            got = results_for(results, calls)
            judged = [Case(label, r, reference(*t, *v), lambda m, t=t, v=v: [reference(
                *t, *v, m)]) for (label, t, v), r in zip(cases, got, strict=True)]
            outcome = judge(name, SEED, judged, mistakes, tol,
                            dtypes=[t[0].dtype for _, t, _ in cases])
            return after(outcome, got) if after else outcome

        return calls, judge_results
    return prepare


def _rope_cases() -> list[tuple]:
    out = []
    for B, h, T, d, pos, theta, dtype, seed in ROPE_CASES:
        x = randn(generator(90 + seed), B, h, T, d, dtype=dtype)
        out.append((f"x {tuple(x.shape)} {str(dtype).replace('torch.', '')}, positions "
                    f"{list(pos)}, theta {theta:g}", (x, torch.tensor(list(pos))), (theta,)))
    q, k = randn(generator(99), 2, 8).unbind(0)
    positions = [p for pair in OFFSET for p in pair]
    out.append((f"q and k at positions {positions}", (torch.stack([q, k] * 2)[None, None],
                                                      torch.tensor(positions)), (10000.0,)))
    return out


def offset_check(outcome: Outcome, got: list[dict]) -> Outcome:
    """RoPE's property on the learner's own rotation (the last case: q and k at two pairs of
    positions one offset apart): equal scores, else a failure saying so; a rotation that has
    it but is not the one asked for is told that it has it."""
    value = got[-1].get("value")
    if not isinstance(value, torch.Tensor) or value.shape != (1, 1, 4, 8):
        return outcome
    r = value[0, 0].double()
    scores = (r[0] @ r[1]).item(), (r[2] @ r[3]).item()
    if abs(scores[0] - scores[1]) > TOL.atol + TOL.rtol * abs(scores[0]):
        outcome.notes.append(f"q.k is {scores[0]:.6g} with q at {OFFSET[0][0]}, k at "
                             f"{OFFSET[0][1]} but {scores[1]:.6g} at {OFFSET[1][0]}, "
                             f"{OFFSET[1][1]}: a rotary score depends on the offset alone")
        if outcome.status == "pass":
            outcome.status, outcome.detail = "FAIL", outcome.notes[-1]
    elif outcome.status == "FAIL":
        outcome.notes.append("your rotation keeps q.k a function of the offset alone (a rotary "
                             "embedding), but not the layout or frequencies asked for")
    return outcome


def _rms_cases() -> list[tuple]:
    out = []
    for n, (rows, d, eps, dtype) in enumerate(((4, 8, 1e-6, torch.float64),
                                               (3, 5, 1e-5, torch.float32))):
        g = generator(110 + n)
        x = randn(g, rows, d, dtype=dtype)
        x[1] = 1e-3 * x[1]  # mean(x^2) about eps: where eps sits decides this row
        out.append((f"x {tuple(x.shape)} {str(dtype).replace('torch.', '')}, eps {eps:g}",
                    (x, (1.0 + 0.3 * randn(g, d)).to(dtype)), (eps,)))
    return out


def _swiglu_cases() -> list[tuple]:
    out = []
    for n, (B, T, D, Fw) in enumerate(((2, 3, 8, 12), (1, 4, 6, 6))):
        g = generator(120 + n)
        ws = (randn(g, Fw, D) / D ** 0.5, randn(g, Fw, D) / D ** 0.5, randn(g, D, Fw) / Fw ** 0.5)
        out.append((f"x ({B}, {T}, {D}), F {Fw}", (randn(g, B, T, D), *ws), ()))
    return out


def _kv_cases() -> list[tuple]:
    return [(f"x (2, {h_kv}, 3, 4), n_rep {rep}", (randn(generator(130 + rep), 2, h_kv, 3, 4),),
             (rep,)) for h_kv, rep in ((2, 3), (3, 2))]


ITEMS = (
    Item("apply_rope", SEED, "apply_rope(x, positions, theta=10000.0) -> x rotated",
         "x (B, h, T, d) rotated at positions (T,) in Hugging Face's rotate-half layout: x cos "
         "+ rotate_half(x) sin, rotate_half(x) = (-x2, x1) of the halves, pair i turned by "
         "p theta^(-2i/d); q.k then depends on the offset alone (checked)", "exact (1e-4) and "
         "the offset property", ROPE_MISTAKES,
         _prepare("apply_rope", "w3_rope", _rope_cases(), llama.rope, ROPE_MISTAKES, TOL,
                  offset_check)),
    Item("rms_norm", SEED, "rms_norm(x, weight, eps=1e-6)",
         "weight * x / sqrt(mean(x^2) + eps) over the last axis, no mean subtracted, no beta",
         "exact", RMS_MISTAKES,
         _prepare("rms_norm", "w3_rms", _rms_cases(), llama.rms_norm, RMS_MISTAKES, EXACT)),
    Item("swiglu", SEED, "swiglu(x, w_gate, w_up, w_down)",
         "(silu(x @ w_gate.T) * (x @ w_up.T)) @ w_down.T, nn.Linear orientation (w_gate, w_up "
         "(F, D), w_down (D, F)), no biases", "exact (float64)", SWIGLU_MISTAKES,
         _prepare("swiglu", "w3_swiglu", _swiglu_cases(), llama.swiglu, SWIGLU_MISTAKES,
                  EXACT)),
    Item("repeat_kv", SEED, "repeat_kv(x, n_rep)",
         "grouped-query attention's keys or values for every query head: x (B, h_kv, T, d) -> "
         "(B, h_kv n_rep, T, d), query head i reading kv head i // n_rep", "exact",
         KV_MISTAKES, _prepare("repeat_kv", "w3_kv", _kv_cases(), llama.repeated_heads,
                               KV_MISTAKES, EXACT)),
)
