"""Seed 002's exercise, ``transformer_decoder``: judged exactly against decoderkit's
``transformer_decoder`` on seeded cases (T = 1, S != T, odd and even D, D = F, float32 and
float64, a nearly constant row where eps matters), and diagnosed with the block family.
"""

from __future__ import annotations

import torch

from decoderkit.grade.reference import blocks
from decoderkit.grade.judge.catalogue import BY_NAME
from decoderkit.grade.judge.items import Inputs, Item, Seed, generator, randn, results_for
from decoderkit.grade.judge.judging import Case, Tolerance, judge
from decoderkit.grade.run.sandbox import Call
from decoderkit.nn.exercise import transformer_decoder

ARGS = ("X", "enc_out", "gamma1", "beta1", "gamma2", "beta2", "gamma3", "beta3",
        "W1", "b1", "W2", "b2")
CASES = (  # (T, S, D, F, dtype, seed, a nearly constant row of X)
    (4, 6, 8, 16, torch.float64, 1, True),
    (1, 3, 5, 7, torch.float32, 2, False),
    (5, 3, 6, 6, torch.float64, 3, True),
    (3, 7, 6, 10, torch.float32, 4, False),
)
TOL = Tolerance(atol=1e-4, rtol=1e-4)
MISTAKES = ("ln_sample_variance", "ln_eps_on_std", "ln_eps_after_division", "no_scale",
            "scale_no_root", "causal_no_diagonal", "mask_flipped", "mask_after_softmax",
            "softmax_wrong_axis", "post_norm_for_pre", "post_norm_for_pre_in_self_attn",
            "post_norm_for_pre_in_cross_attn", "post_norm_for_pre_in_ffn",
            "residual_on_normed", "cross_causal",
            "enc_normalised", "extra_final_norm", "relu_missing", "relu_after_output",
            "b1_omitted", "b2_omitted", "w1_transposed", "ln_rms_for_layer_norm",
            "ffn_gelu_for_relu", "ffn_swish_for_relu")
REFERENCE = blocks.Spec()  # seed 002 is the family's default member


def case_inputs(T: int, S: int, D: int, F: int, dtype: torch.dtype, seed: int,
                flat_row: bool) -> dict[str, torch.Tensor]:
    """The twelve arguments of one case, seeded."""
    g = generator(seed)
    x = randn(g, T, D)
    if flat_row:  # std 1e-3: the placement of eps decides this row's normalisation
        x[T // 2] = 0.5 + 1e-3 * randn(g, D)
    t = {"X": x, "enc_out": randn(g, S, D)}
    for i in (1, 2, 3):
        t[f"gamma{i}"] = 1.0 + 0.3 * randn(g, D)
        t[f"beta{i}"] = 0.3 * randn(g, D)
    t.update(W1=randn(g, D, F) / D ** 0.5, b1=0.3 * randn(g, F), W2=randn(g, F, D) / F ** 0.5,
             b2=0.3 * randn(g, D))
    return {k: v.to(dtype) for k, v in t.items()}


def variant(t: dict[str, torch.Tensor], name: str) -> list[torch.Tensor]:
    """A mistake's outputs on one case's inputs (float64), one per placement that runs."""
    d = {k: v.double() for k, v in t.items()}
    changes = BY_NAME[name].changes
    if changes.get("w1_transposed") and d["W1"].shape[0] != d["W1"].shape[1]:
        return []
    w = blocks.BlockWeights(norms=tuple((d[f"gamma{i}"], d[f"beta{i}"]) for i in (1, 2, 3)),
                            w1=d["W1"], b1=d["b1"], w2=d["W2"], b2=d["b2"])
    T = d["X"].size(0)
    return [blocks.decoder_block(d["X"], d["enc_out"], w, spec,
                                 blocks.visibility(T, T, spec.causal), REFERENCE)
            for spec in blocks.placements(REFERENCE, changes)]


def prepare(inputs: Inputs):
    calls, cases = [], []
    for n, (T, S, D, F, dtype, seed, flat) in enumerate(CASES):
        t = case_inputs(T, S, D, F, dtype, seed, flat)
        args = [inputs.ref(f"td{n}_{k}", t[k]) for k in ARGS]
        calls.append(Call(id=f"td{n}", name="transformer_decoder", kind="call", args=tuple(args)))
        expected = transformer_decoder(*(t[k].double() for k in ARGS))
        label = (f"T={T}, S={S}, D={D}, F={F}, {str(dtype).replace('torch.', '')}, "
                 f"seed {seed}")
        cases.append((label, expected, t))

    def judge_results(results):
        got = results_for(results, calls)
        judged = [Case(label, r, expected, lambda name, t=t: variant(t, name))
                  for (label, expected, t), r in zip(cases, got, strict=True)]
        return judge("transformer_decoder", "002", judged, MISTAKES, TOL,
                     dtypes=[c[4] for c in CASES])

    return calls, judge_results


ITEMS = (
    Item("transformer_decoder", "002",
         "transformer_decoder(X, enc_out, gamma1, beta1, gamma2, beta2, gamma3, beta3, "
         "W1, b1, W2, b2)",
         "one pre-norm decoder block, single head, identity projections: causal "
         "self-attention, cross-attention to enc_out, ReLU FFN; LN with population variance "
         "and eps 1e-5 inside the root; returns (T, D) in X's dtype, inputs unchanged",
         "exact", MISTAKES, prepare),
)

SEED = Seed("002", "The decoder block by hand: one pre-norm block, single head", ITEMS)
