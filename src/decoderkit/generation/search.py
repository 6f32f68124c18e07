"""Beam search over the incremental decoder of ``decoding.py``.

Each source keeps ``beam_size`` hypotheses as rows of one batch (N = B * K rows). A step
extends every live hypothesis by every token, ranks the K * V candidates of a source by
score / length ** length_penalty, keeps the best K, and reorders the decoder's prefix and
cache rows by parent hypothesis. A hypothesis that emits EOS is finished: it stays in the
beam with a frozen score and length (its only continuation is pad, at log-probability 0),
competing on its normalised score until every hypothesis of every source is finished or
has its source's ``max_len`` tokens (then frozen likewise).

Legend: B batch, K beam size, N = B * K rows, V target vocabulary, L generated length.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from decoderkit.generation.decoding import STOP_EOS, STOP_MAX_LEN, Generation, check_call
from decoderkit.generation.limits import (
    PerRow,
    banned_ids,
    check_int,
    check_length_penalty,
    logits_dtype,
    restrict,
)
from decoderkit.generation.step import IncrementalDecoder, decode_step, evaluating, record_step
from decoderkit.nn.layers import AttentionRecord
from decoderkit.nn.model import EncoderDecoder


def beam_search(model: EncoderDecoder, src: Tensor, src_mask: Tensor | None, *, beam_size: int,
                max_len: PerRow, min_len: int = 0, length_penalty: float = 1.0, n_best: int = 1,
                use_cache: bool = True, explain: int = 0,
                step: Callable[..., Tensor] = decode_step) -> Generation:
    """Batched beam search; returns the best hypothesis per source and the ``n_best`` list.

    src (B, S) long, src_mask (B, 1, S) bool (None: from ``pad_id``). Hypotheses are ranked
    by log p(y | src) / |y| ** length_penalty, |y| counting EOS (0: raw log-probability;
    at most what keeps |y| ** length_penalty finite: ``limits.check_length_penalty``).
    ``max_len``: one int, or one per source (each then searched as it would be alone).
    Pad and BOS are never generated; log p is the model's own, not renormalised. Beam size 1
    is greedy decoding. ``explain`` > 0 traces the best hypothesis' steps. ``step``: the
    model call of a step, as in ``greedy_decode``.
    """
    src_mask, limit = check_call(model, src, src_mask, max_len, min_len, explain, step)
    c = model.config
    K = check_int("beam_size", beam_size, 1, c.tgt_vocab - len(banned_ids(c)))
    check_int("n_best", n_best, 1, K)
    alpha = check_length_penalty(length_penalty, max(limit.tolist(), default=1),
                                 logits_dtype(model))
    with evaluating(model), torch.inference_mode():
        return _search(model, src, src_mask, K, limit, min_len, alpha, n_best, use_cache,
                       explain, step)


def _search(model, src, src_mask, K, limit, min_len, alpha, n_best, use_cache,
            explain, step) -> Generation:
    c = model.config
    B, V, device = src.size(0), c.tgt_vocab, src.device
    memory = model.encode(src, src_mask)  # (B, S, d), once
    dec = IncrementalDecoder(model, memory, src_mask, int(limit.max()), use_cache, step)
    dec.expand(K)  # N = B * K rows, a source's hypotheses consecutive
    score = torch.zeros(B, K, dtype=memory.dtype, device=device)  # log p of each hypothesis
    score[:, 1:] = float("-inf")  # all K start as the same BOS: keep one
    length = torch.zeros(B, K, dtype=torch.long, device=device)
    ended = torch.zeros(B, K, dtype=torch.bool, device=device)  # EOS generated
    done = ended.clone()  # ended, or at its source's max_len
    pad_only = torch.full((V,), float("-inf"), dtype=memory.dtype, device=device)
    pad_only[c.pad_id] = 0.0  # a finished hypothesis' one continuation
    first_row = torch.arange(B, device=device)[:, None] * K  # (B, 1)
    steps = []
    for t in range(int(limit.max())):
        record = AttentionRecord() if explain else None
        logp = restrict(dec.logprobs(record), t, min_len, c)  # (N, V)
        logp = torch.where(done.view(-1, 1), pad_only, logp)
        cand = (score.view(-1, 1) + logp).view(B, K * V)  # log p of each extension
        cand_len = (length + ~done).view(B, K, 1)
        ranked = (cand.view(B, K, V) / cand_len.to(cand.dtype) ** alpha).view(B, K * V)
        pick = ranked.topk(K, dim=-1).indices  # (B, K)
        parent, token = pick // V, pick % V  # (B, K) each
        rows = (first_row + parent).view(-1)  # (N,) parent row of each new hypothesis
        score = cand.gather(1, pick)
        length = cand_len.view(B, K).gather(1, parent)
        ended = ended.gather(1, parent) | (~done.gather(1, parent) & (token == c.eos_id))
        done = ended | (length >= limit[:, None])
        if explain:
            steps = [s.select(rows) for s in steps]
            steps.append(record_step(record, logp, token.view(-1), explain, rows))
        dec.reorder_beams(rows)
        dec.append(token.view(-1))
        if bool(done.all()):
            break
    final = score / length.to(score.dtype) ** alpha  # (B, K)
    final, order = final.sort(dim=-1, descending=True)
    tokens = dec.prefix[:, 1:].view(B, K, -1).gather(
        1, order[:, :, None].expand(-1, -1, dec.prefix.size(1) - 1))  # (B, K, L)
    best = (first_row[:, 0] + order[:, 0])  # (B,) row of each source's best hypothesis
    reasons = [STOP_EOS if e else STOP_MAX_LEN for e in ended.view(-1)[best].tolist()]
    return Generation(tokens[:, 0].clone(), length.view(-1)[best], final[:, 0], reasons,
                      nbest_tokens=tokens[:, :n_best].clone(),
                      nbest_scores=final[:, :n_best].clone(),
                      steps=[s.select(best) for s in steps])
