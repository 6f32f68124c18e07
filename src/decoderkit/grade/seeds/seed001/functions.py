"""Seed 001's (the Annotated Transformer's) functions and its LabelSmoothing: ``attention``,
``subsequent_mask``, ``rate``, ``LabelSmoothing`` and ``greedy_decode``, each in the seed's own
convention (masks: True/1 = may attend, -1e9 for blocked scores; smoothing over V - 2).
"""

from __future__ import annotations

import torch

from decoderkit.grade.reference import blocks, pieces
from decoderkit.grade.judge.catalogue import BY_NAME
from decoderkit.grade.judge.items import Inputs, Item, generator, randn, results_for
from decoderkit.grade.judge.judging import Case, Outcome, TokenCase, Tolerance, judge, judge_tokens
from decoderkit.grade.run.sandbox import Call
from decoderkit.nn.attention import attention as reference_attention
from decoderkit.nn.masks import causal_mask
from decoderkit.training.objective import noam_rate

AT = blocks.Spec(blocked=-1e9)  # the Annotated Transformer's attention arithmetic
TOL = Tolerance(atol=1e-5, rtol=1e-5)
ATTENTION_MISTAKES = ("no_scale", "scale_no_root", "mask_flipped", "mask_after_softmax",
                      "softmax_wrong_axis")


def _attention_cases():
    """(label, q, k, v, mask or None, dtype): causal, padding, an all-blocked row, no mask."""
    out = []
    for n, (B, h, T, S, dk, dtype, kind) in enumerate((
            (2, 2, 4, 4, 8, torch.float64, "causal"), (2, 2, 3, 5, 4, torch.float32, "padding"),
            (1, 1, 3, 3, 6, torch.float64, "empty row"), (2, 1, 3, 6, 5, torch.float64, None))):
        g = generator(20 + n)
        q, k, v = randn(g, B, h, T, dk, dtype=dtype), randn(g, B, h, S, dk, dtype=dtype), \
            randn(g, B, h, S, dk, dtype=dtype)
        if kind == "causal":
            mask = causal_mask(T)[None, None]  # (1, 1, T, T)
        elif kind == "padding":
            mask = torch.ones(B, 1, 1, S, dtype=torch.bool)
            mask[1, ..., -2:] = False
        elif kind == "empty row":
            mask = causal_mask(T)[None, None].clone()
            mask[..., 1, :] = False  # query 1 sees no key
        else:
            mask = None
        label = (f"q {tuple(q.shape)}, k/v {tuple(k.shape)}, {kind or 'no'} mask, "
                 f"{str(dtype).replace('torch.', '')}, seed {20 + n}")
        out.append((label, q, k, v, mask, dtype))
    return out


def _attention_variants(q, k, v, mask, rows, name):
    changes = dict(BY_NAME[name].changes)
    allowed = mask
    if changes.pop("causal", None) == "flipped":
        allowed = None if mask is None else ~mask
    spec = AT.but(**changes)
    out, weights = blocks.attend(q.double(), k.double(), v.double(), allowed, spec)
    return [out[rows]], [weights[rows]]


def prepare_attention(inputs: Inputs):
    calls, cases = [], []
    for n, (label, q, k, v, mask, dtype) in enumerate(_attention_cases()):
        args = [inputs.ref(f"att{n}_{x}", t) for x, t in (("q", q), ("k", k), ("v", v))]
        args.append({"v": None} if mask is None else inputs.ref(f"att{n}_mask", mask))
        calls.append(Call(id=f"att{n}", name="attention", kind="call", args=tuple(args)))
        out, weights = reference_attention(q.double(), k.double(), v.double(), mask)
        rows = (torch.ones(q.shape[:-1], dtype=torch.bool) if mask is None
                else mask.any(-1).expand(q.shape[:-1]))  # queries with a visible key
        cases.append((label, out, weights, rows, (q, k, v, mask), dtype))

    def judge_results(results):
        judged, dtypes, notes = [], [], []
        for (label, out, weights, rows, qkvm, dtype), r in zip(
                cases, results_for(results, calls), strict=True):
            value = r.get("value")
            if "error" in r or not (isinstance(value, list) and len(value) == 2):
                kind = type(value).__name__ if not isinstance(value, list) else \
                    f"sequence of {len(value)}"
                judged.append(Case(label, r if "error" in r else {"value": {
                    "__type__": f"{kind}, not the pair (output, p_attn)"}}, out, lambda m: []))
                dtypes.append(dtype)
                continue
            got_out, got_w = value
            for part, got, ref, idx in (("output", got_out, out, 0), ("p_attn", got_w, weights, 1)):
                ok = isinstance(got, torch.Tensor) and got.shape == ref.shape
                judged.append(Case(f"{label}, {part}", {"value": got[rows] if ok else got},
                                   ref[rows], lambda m, idx=idx, qkvm=qkvm, rows=rows:
                                   _attention_variants(*qkvm, rows, m)[idx]))
                dtypes.append(dtype)
                if ok and (~rows).any():
                    notes.append(_empty_row_note(got_w[~rows]) if part == "p_attn" else None)
        outcome = judge("attention", "001", judged, ATTENTION_MISTAKES, TOL, dtypes)
        outcome.notes += [n for n in dict.fromkeys(notes) if n]
        return outcome

    return calls, judge_results


def _empty_row_note(weights: torch.Tensor) -> str | None:
    """What the learner's code does with a query that sees no key (not a failure)."""
    if weights.isnan().any():
        return ("a query with no visible key gets NaN weights: your blocked scores are -inf; "
                "the seed's -1e9 gives it uniform weights (rows with a visible key agree)")
    if torch.allclose(weights.double(), torch.zeros_like(weights.double())):
        return "a query with no visible key gets zero weights (decoderkit's convention)"
    return None


def prepare_subsequent_mask(inputs: Inputs):
    sizes = (1, 4, 5)
    calls = [Call(id=f"sub{n}", name="subsequent_mask", kind="call", args=({"v": s},))
             for n, s in enumerate(sizes)]
    variants = {"causal_no_diagonal": lambda s: torch.ones(s, s, dtype=torch.bool).tril(-1),
                "mask_flipped": lambda s: ~causal_mask(s)}

    def judge_results(results):
        judged, notes = [], []
        for size, r in zip(sizes, results_for(results, calls), strict=True):
            value = r.get("value")
            if isinstance(value, torch.Tensor) and value.numel() == size * size:
                if value.shape != (1, size, size):
                    notes.append(f"returns shape {tuple(value.shape)}; the seed's is "
                                 f"(1, size, size), which broadcasts over the batch")
                if value.dtype != torch.bool:
                    notes.append(f"returns dtype {value.dtype}; the seed's is bool "
                                 f"(mask == 0 still reads it the same way)")
                r = {"value": (value != 0).reshape(size, size).double()}
            judged.append(Case(f"subsequent_mask({size})", r, causal_mask(size).double(),
                               lambda m, s=size: [variants[m](s).double()]))
        outcome = judge("subsequent_mask", "001", judged, tuple(variants),
                        Tolerance(1e-12, 0.0))
        outcome.notes += list(dict.fromkeys(notes))
        return outcome

    return calls, judge_results


RATE_CASES = ((0, 512, 1.0, 4000), (1, 512, 1.0, 4000), (1000, 512, 1.0, 4000),
              (4000, 512, 1.0, 4000), (8000, 512, 1.0, 4000), (50, 256, 2.0, 100),
              (400, 256, 2.0, 100))


def prepare_rate(inputs: Inputs):
    calls = [Call(id=f"rate{n}", name="rate", kind="call", args=tuple({"v": a} for a in case))
             for n, case in enumerate(RATE_CASES)]

    def judge_results(results):
        judged = []
        for case, r in zip(RATE_CASES, results_for(results, calls), strict=True):
            value = r.get("value")
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                r = {"value": torch.tensor(float(value), dtype=torch.float64)}
            elif isinstance(value, torch.Tensor) and value.numel() == 1:
                r = {"value": value.reshape(()).double()}
            expected = torch.tensor(noam_rate(max(case[0], 1), case[1], case[3], case[2]),
                                    dtype=torch.float64)
            judged.append(Case(f"rate(step={case[0]}, model_size={case[1]}, factor={case[2]}, "
                               f"warmup={case[3]})", r, expected,
                               lambda m, c=case: [torch.tensor(pieces.rate(*c, mistake=m),
                                                               dtype=torch.float64)]))
        return judge("rate", "001", judged, ("rate_warmup_exponent", "rate_d_exponent"),
                     Tolerance(0.0, 1e-6))

    return calls, judge_results


def prepare_label_smoothing(inputs: Inputs):
    V, pad, eps, N = 7, 0, 0.4, 5
    g = generator(31)
    x = torch.log_softmax(randn(g, N, V), dim=-1).float()
    target = torch.tensor([3, 0, 5, 1, 6])  # row 1 is padding
    call = Call(id="ls0", name="LabelSmoothing", kind="module", init=(V, pad, eps), seed=0,
                forwards=(("forward", (inputs.ref("ls_x", x), inputs.ref("ls_t", target))),),
                attrs=("true_dist",), perturb=False)
    label = f"LabelSmoothing(size={V}, padding_idx={pad}, smoothing={eps}), x ({N}, {V})"
    dist, loss = pieces.at_label_smoothing(x, target, pad, eps)
    mistakes = ("ls_over_v", "ls_over_v_minus_1", "ls_pad_kept")

    def judge_results(results):
        r = results_for(results, [call])[0]
        if "error" in r:
            return judge("LabelSmoothing", "001", [Case(label, r, loss, lambda m: [])],
                         mistakes, TOL)
        variants = {m: pieces.at_label_smoothing(x, target, pad, eps, m) for m in mistakes}
        cases = [Case(f"{label}, loss", {"value": _scalar(r["value"][0])}, loss,
                      lambda m: [variants[m][1]])]
        if isinstance(r["attrs"].get("true_dist"), torch.Tensor):
            cases.append(Case(f"{label}, true_dist", {"value": r["attrs"]["true_dist"]}, dist,
                              lambda m: [variants[m][0]]))
        return judge("LabelSmoothing", "001", cases, mistakes, TOL)

    return [call], judge_results


def _scalar(value):
    return value.reshape(()) if isinstance(value, torch.Tensor) and value.numel() == 1 else value


def prepare_greedy_decode(inputs: Inputs):
    cases = ((6, 1, 11, 4), (4, 5, 13, 2))  # (max_len, start_symbol, vocab, eos_at)
    calls = []
    for n, (max_len, start, vocab, eos_at) in enumerate(cases):
        src = inputs.ref(f"gd{n}_src", torch.tensor([[4, 5, 6]]))
        mask = inputs.ref(f"gd{n}_mask", torch.ones(1, 1, 3, dtype=torch.bool))
        calls.append(Call(id=f"gd{n}", name="greedy_decode", kind="decode_annotated",
                          args=(src, mask, {"v": max_len}, {"v": start}), vocab=vocab,
                          eos_at=eos_at))
    mistakes = ("decode_drops_last", "decode_last_token_only")

    def judge_results(results):
        got = results_for(results, calls)
        token_cases = [TokenCase(
            f"greedy_decode(scripted model V={vocab}, max_len={max_len}, start_symbol={start})",
            r, pieces.decode_tokens(start, max_len - 1, vocab, eos_at, False),
            lambda m, a=(start, max_len - 1, vocab, eos_at): pieces.decode_tokens(
                *a, False, m)) for (max_len, start, vocab, eos_at), r in zip(cases, got,
                                                                             strict=True)]
        outcome = judge_tokens("greedy_decode", "001", token_cases, mistakes)
        return _check_decode_masks(outcome, got)

    return calls, judge_results


def _check_decode_masks(outcome: Outcome, got: list[dict]) -> Outcome:
    """Every tgt_mask the loop gave model.decode must be subsequent_mask(len(ys))."""
    for r in got:
        for ids, mask in zip(r.get("seen", []), r.get("masks", []), strict=False):
            L = len(ids)
            if not isinstance(mask, torch.Tensor) or mask.numel() != L * L or \
                    not torch.equal((mask != 0).reshape(L, L), causal_mask(L)):
                if outcome.status == "pass":
                    outcome.status = "FAIL"
                    outcome.detail = (f"the tgt_mask passed to model.decode for {L} tokens is "
                                      f"not subsequent_mask({L}) (True = may attend)")
                return outcome
    return outcome


ITEMS = (
    Item("attention", "001", "attention(query, key, value, mask=None, dropout=None)",
         "softmax(Q K^T / sqrt(d_k), masked_fill(mask == 0, -1e9)) V; returns (output, p_attn)",
         "exact", ATTENTION_MISTAKES, prepare_attention),
    Item("subsequent_mask", "001", "subsequent_mask(size)",
         "(1, size, size) bool, True on and below the diagonal (may attend)", "exact",
         ("causal_no_diagonal", "mask_flipped"), prepare_subsequent_mask),
    Item("rate", "001", "rate(step, model_size, factor, warmup)",
         "factor d^(-1/2) min(s^(-1/2), s w^(-3/2)), step 0 read as 1", "exact",
         ("rate_warmup_exponent", "rate_d_exponent"), prepare_rate),
    Item("LabelSmoothing", "001", "LabelSmoothing(size, padding_idx, smoothing=0.0)",
         "KLDivLoss(sum) against smoothing/(size-2), 1-smoothing on gold, padding column and "
         "padding rows 0; true_dist kept", "exact (loss and true_dist)",
         ("ls_over_v", "ls_over_v_minus_1", "ls_pad_kept"), prepare_label_smoothing),
    Item("greedy_decode", "001", "greedy_decode(model, src, src_mask, max_len, start_symbol)",
         "ys starts at start_symbol and grows by argmax of generator(decode(...)[:, -1]) for "
         "max_len - 1 steps, tgt_mask = subsequent_mask(len)", "exact (on a scripted model)",
         ("decode_drops_last", "decode_last_token_only"), prepare_greedy_decode),
)
