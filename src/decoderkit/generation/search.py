"""Beam search over the incremental decoder of ``decoding.py``.

Each source keeps ``beam_size`` hypotheses as rows of one batch (N = B * K rows). A step
extends every live hypothesis by every token, ranks the K * V candidates of a source by
score / length ** length_penalty, keeps the best K, and reorders the decoder's prefix and
cache rows by parent hypothesis. A hypothesis that emits EOS is finished: it stays in the
beam with a frozen score and length (its only continuation is pad, at log-probability 0),
competing on its normalised score until every hypothesis of every source is finished or
``max_len`` tokens are generated.

Legend: B batch, K beam size, N = B * K rows, V target vocabulary, L generated length.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from decoderkit.base.errors import UsageError
from decoderkit.generation.decoding import (
    STOP_EOS,
    STOP_MAX_LEN,
    Generation,
    IncrementalDecoder,
    block_eos,
    check_inputs,
    decode_step,
    evaluating,
    record_step,
)
from decoderkit.nn.model import EncoderDecoder


def beam_search(model: EncoderDecoder, src: Tensor, src_mask: Tensor | None, *, beam_size: int,
                max_len: int, min_len: int = 0, length_penalty: float = 1.0, n_best: int = 1,
                use_cache: bool = True, explain: int = 0,
                step: Callable[..., Tensor] = decode_step) -> Generation:
    """Batched beam search; returns the best hypothesis per source and the ``n_best`` list.

    src (B, S) long, src_mask (B, 1, S) bool (None: from ``pad_id``). Hypotheses are ranked
    by log p(y | src) / |y| ** length_penalty, |y| counting EOS (0: raw log-probability).
    Beam size 1 is greedy decoding. ``explain`` > 0 traces the best hypothesis' steps.
    ``step``: the model call of a step, as in ``greedy_decode``.
    """
    src_mask = check_inputs(model, src, src_mask, max_len, min_len, step)
    c = model.config
    K = beam_size
    if not isinstance(K, int) or isinstance(K, bool) or not 1 <= K <= c.tgt_vocab:
        raise UsageError(f"beam_size must be an int in [1, tgt_vocab={c.tgt_vocab}], got {K!r}")
    if not isinstance(n_best, int) or not 1 <= n_best <= K:
        raise UsageError(f"n_best must be an int in [1, beam_size={K}], got {n_best!r}")
    if length_penalty < 0:
        raise UsageError(f"length_penalty must be >= 0, got {length_penalty}")
    with evaluating(model), torch.inference_mode():
        return _search(model, src, src_mask, K, max_len, min_len, length_penalty, n_best,
                       use_cache, explain, step)


def _search(model, src, src_mask, K, max_len, min_len, alpha, n_best, use_cache,
            explain, step) -> Generation:
    c = model.config
    B, V, device = src.size(0), c.tgt_vocab, src.device
    memory = model.encode(src, src_mask)  # (B, S, d), once
    dec = IncrementalDecoder(model, memory, src_mask, max_len, use_cache, explain > 0, step)
    dec.expand(K)  # N = B * K rows, a source's hypotheses consecutive
    score = torch.zeros(B, K, dtype=memory.dtype, device=device)  # log p of each hypothesis
    score[:, 1:] = float("-inf")  # all K start as the same BOS: keep one
    length = torch.zeros(B, K, dtype=torch.long, device=device)
    done = torch.zeros(B, K, dtype=torch.bool, device=device)
    pad_only = torch.full((V,), float("-inf"), dtype=memory.dtype, device=device)
    pad_only[c.pad_id] = 0.0  # a finished hypothesis' one continuation
    first_row = torch.arange(B, device=device)[:, None] * K  # (B, 1)
    steps = []
    for step in range(max_len):
        logp = block_eos(dec.logprobs(), step, min_len, c.eos_id)  # (N, V)
        logp = torch.where(done.view(-1, 1), pad_only, logp)
        cand = (score.view(-1, 1) + logp).view(B, K * V)  # log p of each extension
        cand_len = (length + ~done).view(B, K, 1)
        ranked = (cand.view(B, K, V) / cand_len.to(cand.dtype) ** alpha).view(B, K * V)
        pick = ranked.topk(K, dim=-1).indices  # (B, K)
        parent, token = pick // V, pick % V  # (B, K) each
        rows = (first_row + parent).view(-1)  # (N,) parent row of each new hypothesis
        score = cand.gather(1, pick)
        length = cand_len.view(B, K).gather(1, parent)
        done = done.gather(1, parent) | (token == c.eos_id)
        if explain:
            steps = [s.select(rows) for s in steps]
            steps.append(record_step(dec, logp, token.view(-1), explain, rows))
        dec.reorder_beams(rows)
        dec.append(token.view(-1))
        if bool(done.all()):
            break
    final = score / length.to(score.dtype) ** alpha  # (B, K)
    final, order = final.sort(dim=-1, descending=True)
    tokens = dec.prefix[:, 1:].view(B, K, -1).gather(
        1, order[:, :, None].expand(-1, -1, dec.prefix.size(1) - 1))  # (B, K, L)
    best = (first_row[:, 0] + order[:, 0])  # (B,) row of each source's best hypothesis
    reasons = [STOP_EOS if d else STOP_MAX_LEN for d in done.view(-1)[best].tolist()]
    return Generation(tokens[:, 0].clone(), length.view(-1)[best], final[:, 0], reasons,
                      nbest_tokens=tokens[:, :n_best].clone(),
                      nbest_scores=final[:, :n_best].clone(),
                      steps=[s.select(best) for s in steps])
