"""Week 3's transfer items, GPT-1's fine-tuning (Radford et al. 2018, §3.2-3.3): the input
transformation (``transform_input``), the classification head at the extract token
(``classification_head``) and the loss with the auxiliary LM term (``transfer_loss``).
Each reference is written here from the paper's formulas, in float64.

Legend: B batch, T positions, d width, C classes, V vocabulary.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from decoderkit.grade.judge.items import Inputs, Item, generator, randn, results_for
from decoderkit.grade.judge.judging import Case, TokenCase, Tolerance, judge, judge_tokens
from decoderkit.grade.run.sandbox import Call
from decoderkit.grade.seeds.week3.config import SEED

TOL = Tolerance(atol=1e-6, rtol=1e-6)
START, DELIM, EXTRACT = 50, 51, 52  # the new tokens' ids in the cases
TRANSFORM_MISTAKES = ("delimiter_missing", "start_or_extract_missing")
HEAD_MISTAKES = ("head_wrong_position",)
LOSS_MISTAKES = ("lambda_on_task_loss", "lm_loss_counts_padding")


def transformed(first: list[int], second: list[int] | None, mistake: str | None = None
                ) -> list[list[int]]:
    """``[<s>] first [$ second] [<e>]``, or the ids a mistaken transformation gives."""
    middle = list(first) if second is None else [*first, DELIM, *second]
    if mistake == "delimiter_missing":  # a single text is unchanged by it
        return [[START, *first, *(second or ()), EXTRACT]]
    if mistake == "start_or_extract_missing":
        return [middle + [EXTRACT], [START] + middle, middle]
    return [[START, *middle, EXTRACT]]


TRANSFORM_CASES = (([7, 3, 9], None), ([4, 4], [12, 1, 8]), ([2], [5]))


def prepare_transform(inputs: Inputs):
    calls = [Call(id=f"w3_tr{n}", name="transform_input", kind="call",
                  args=({"v": a}, {"v": b}, {"v": START}, {"v": DELIM}, {"v": EXTRACT}))
             for n, (a, b) in enumerate(TRANSFORM_CASES)]

    def judge_results(results):
        cases = [TokenCase(f"transform_input({a}, {b}, start={START}, delimiter={DELIM}, "
                           f"extract={EXTRACT})", r, transformed(a, b)[0],
                           lambda m, a=a, b=b: transformed(a, b, m))
                 for (a, b), r in zip(TRANSFORM_CASES, results_for(results, calls),
                                      strict=True)]
        return judge_tokens("transform_input", SEED, cases, TRANSFORM_MISTAKES)

    return calls, judge_results


def head(h: Tensor, positions: Tensor, weight: Tensor) -> Tensor:
    """h (B, T, d), positions (B,), weight (C, d) -> logits (B, C) = h[b, positions[b]] W^T."""
    return h[torch.arange(h.size(0)), positions] @ weight.T


def head_variants(h: Tensor, positions: Tensor, weight: Tensor) -> list[Tensor]:
    """The head read at the last, the first, or a neighbouring position."""
    T = h.size(1)
    places = [torch.full_like(positions, T - 1), torch.zeros_like(positions),
              (positions - 1).clamp_min(0), (positions + 1).clamp_max(T - 1)]
    return [head(h, p, weight) for p in places]


def _head_cases():
    out = []
    for n, (B, T, d, C, lengths) in enumerate(((3, 6, 8, 3, (6, 4, 2)), (2, 5, 4, 2, (3, 5)))):
        g = generator(70 + n)
        h, w = randn(g, B, T, d), randn(g, C, d)
        positions = torch.tensor(lengths) - 1  # each row's extract token; the rest padding
        out.append((f"h {tuple(h.shape)}, positions {positions.tolist()}, weight "
                    f"{tuple(w.shape)}", h, positions, w))
    return out


def prepare_head(inputs: Inputs):
    cases = _head_cases()
    calls = [Call(id=f"w3_hd{n}", name="classification_head", kind="call",
                  args=(inputs.ref(f"w3_hd{n}_h", h), inputs.ref(f"w3_hd{n}_p", p),
                        inputs.ref(f"w3_hd{n}_w", w)))
             for n, (_, h, p, w) in enumerate(cases)]

    def judge_results(results):
        judged = [Case(label, r, head(h, p, w),
                       lambda m, h=h, p=p, w=w: head_variants(h, p, w))
                  for (label, h, p, w), r in zip(cases, results_for(results, calls),
                                                 strict=True)]
        return judge("classification_head", SEED, judged, HEAD_MISTAKES, TOL)

    return calls, judge_results


def loss(class_logits: Tensor, labels: Tensor, lm_logits: Tensor, lm_targets: Tensor,
         lm_mask: Tensor, lm_coef: float, mistake: str | None = None) -> Tensor:
    """GPT-1's L3 = L2 + lambda L1 per batch: the mean over examples of -log P(label | x),
    plus lm_coef times the mean over examples of each one's mean -log p(token) over its real
    (``lm_mask``) positions; or a mistaken variant."""
    task = F.cross_entropy(class_logits, labels)
    per_token = F.cross_entropy(lm_logits.transpose(1, 2), lm_targets, reduction="none")
    mask = torch.ones_like(lm_mask) if mistake == "lm_loss_counts_padding" else lm_mask
    lm = ((per_token * mask).sum(1) / mask.sum(1)).mean()
    if mistake == "lambda_on_task_loss":
        return lm_coef * task + lm
    return task + lm_coef * lm


def _loss_cases():
    out = []
    for n, (B, T, V, C, lengths, coef) in enumerate(((3, 6, 11, 3, (6, 3, 4), 0.5),
                                                     (2, 4, 7, 2, (2, 4), 0.25))):
        g = generator(80 + n)
        mask = torch.arange(T)[None, :] < torch.tensor(lengths)[:, None]  # (B, T)
        args = (randn(g, B, C), torch.randint(0, C, (B,), generator=g), randn(g, B, T, V),
                torch.randint(0, V, (B, T), generator=g), mask, coef)
        out.append((f"B {B}, T {T}, V {V}, C {C}, real tokens {list(lengths)}, lm_coef {coef}",
                    args))
    return out


def _scalar(result: dict) -> dict:
    """A float or a one-element tensor as a 0-d float64 tensor (others left to the judge)."""
    value = result.get("value")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return {"value": torch.tensor(float(value), dtype=torch.float64)}
    if isinstance(value, Tensor) and value.numel() == 1:
        return {"value": value.reshape(()).double()}
    return result


def prepare_loss(inputs: Inputs):
    cases = _loss_cases()
    calls = []
    for n, (_, args) in enumerate(cases):
        refs = tuple(inputs.ref(f"w3_tl{n}_{i}", a) for i, a in enumerate(args[:5]))
        calls.append(Call(id=f"w3_tl{n}", name="transfer_loss", kind="call",
                          args=(*refs, {"v": args[5]})))

    def judge_results(results):
        judged = [Case(label, _scalar(r), loss(*args), lambda m, a=args: [loss(*a, m)])
                  for (label, args), r in zip(cases, results_for(results, calls), strict=True)]
        return judge("transfer_loss", SEED, judged, LOSS_MISTAKES, TOL)

    return calls, judge_results


ITEMS = (
    Item("transform_input", SEED, "transform_input(first, second, start_id, delimiter_id, "
         "extract_id) -> ids", "GPT-1's input transformation: [start] + first + [extract] "
         "for one text (second is None), [start] + first + [delimiter] + second + [extract] "
         "for a pair; a list or 1-D tensor of ids", "exact ids", TRANSFORM_MISTAKES,
         prepare_transform),
    Item("classification_head", SEED, "classification_head(h, positions, weight) -> (B, C)",
         "the linear head on the final hidden state at each row's extract token: logits[b] = "
         "h[b, positions[b]] @ weight.T (h (B, T, d), positions (B,), weight (C, d); rows are "
         "right-padded, so the extract token is not always the last position)",
         "exact (float64)", HEAD_MISTAKES, prepare_head),
    Item("transfer_loss", SEED, "transfer_loss(class_logits, labels, lm_logits, lm_targets, "
         "lm_mask, lm_coef) -> scalar", "L = L_task + lm_coef * L_LM: the mean cross-entropy "
         "of the labels (class_logits (B, C)) plus lm_coef times the mean over examples of "
         "each one's mean token cross-entropy (lm_logits (B, T, V), lm_targets (B, T)) over "
         "its real positions (lm_mask (B, T) True)", "exact (float64)", LOSS_MISTAKES,
         prepare_loss),
)
