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

from decoderkit.base.errors import UsageError
from decoderkit.generation.seq2seq.decoding import STOP_EOS, STOP_MAX_LEN, Generation, check_call
from decoderkit.generation.limits import PerRow, check_int, logits_dtype
from decoderkit.generation.seq2seq.bounds import (
    banned_ids,
    check_length_penalty,
    last_step,
    restrict,
)
from decoderkit.generation.seq2seq.selection import top_k
from decoderkit.generation.seq2seq.step import IncrementalDecoder, decode_step, record_step
from decoderkit.nn.modes import evaluating
from decoderkit.nn.layers import AttentionRecord
from decoderkit.nn.seq2seq.model import EncoderDecoder


def beam_search(model: EncoderDecoder, src: Tensor, src_mask: Tensor | None, *, beam_size: int,
                max_len: PerRow, min_len: int = 0, length_penalty: float = 1.0, n_best: int = 1,
                use_cache: bool = True, explain: int = 0, retire: bool = False,
                step: Callable[..., Tensor] = decode_step, forced_eos: bool = False,
                banned: tuple[int, ...] = ()) -> Generation:
    """Batched beam search; returns the best hypothesis per source and the ``n_best`` list.

    src (B, S) long, src_mask (B, 1, S) bool (None: from ``source_pad_id``). Hypotheses are ranked
    by log p(y | src) / |y| ** length_penalty, |y| counting EOS (0: raw log-probability;
    at most what keeps |y| ** length_penalty finite: ``limits.check_length_penalty``).
    ``max_len``: one int, or one per source (each then searched as it would be alone).
    Pad and BOS are never generated; log p is the model's own, not renormalised. Beam size 1
    is greedy decoding. ``explain`` > 0 traces the best hypothesis' steps. ``step``: the
    model call of a step, as in ``greedy_decode``. ``retire``: Hugging Face's rule instead of
    ours (``_retiring``; explain not offered). ``forced_eos``: a hypothesis' last allowed
    token is EOS, with log-prob 0; ``banned``: more ids never generated (``bounds.restrict``).
    """
    src_mask, limit = check_call(model, src, src_mask, max_len, min_len, explain, step)
    c = model.config
    K = check_int("beam_size", beam_size, 1, c.tgt_vocab - len({*banned_ids(c), *banned}))
    check_int("n_best", n_best, 1, K)
    alpha = check_length_penalty(length_penalty, max(limit.tolist(), default=1),
                                 logits_dtype(model))
    if retire and explain:
        raise UsageError("explain is not offered with retire=True (Hugging Face's beam rule)")
    with evaluating(model), torch.inference_mode():
        if retire:
            return _retiring(model, src, src_mask, K, limit, min_len, alpha, n_best, use_cache,
                             step, (forced_eos, banned))  # bans: restrict's two rules
        return _search(model, src, src_mask, K, limit, min_len, alpha, n_best, use_cache,
                       explain, step, (forced_eos, banned))


def _search(model, src, src_mask, K, limit, min_len, alpha, n_best, use_cache,
            explain, step, bans) -> Generation:
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
    ended_sources = _Finished(B, K, c.pad_id, device) if compacting(model, explain, step) \
        else None
    for t in range(int(limit.max())):
        record = AttentionRecord() if explain else None
        logp = restrict(dec.logprobs(record), t, min_len, c,
                        last_step(bans[0], limit, t, K), bans[1])  # (N, V)
        logp[done.view(-1)] = pad_only  # restrict's own new tensor: only the done rows written
        cand = (score.view(-1, 1) + logp).view(B, K * V)  # log p of each extension
        cand_len = (length + ~done).view(B, K, 1)
        ranked = (cand.view(B, K, V) / cand_len.to(cand.dtype) ** alpha).view(B, K * V)
        pick = top_k(ranked, K)[1]  # (B, K)
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
        over = done.all(dim=1)  # (B,) sources whose hypotheses are all done: they leave
        if ended_sources is not None and bool(over.any()):
            keep = ended_sources.add(over, score, length, ended, dec.prefix)
            score, length, ended, done, limit = (x[keep] for x in (score, length, ended,
                                                                   done, limit))
            dec.keep_sources(keep, K)
            B = keep.numel()
            first_row = torch.arange(B, device=device)[:, None] * K
    if ended_sources is not None:  # every source's hypotheses, in the order given
        ended_sources.add(torch.ones(B, dtype=torch.bool, device=device), score, length, ended,
                          dec.prefix)
        score, length, ended, tokens = ended_sources.whole()
    else:
        tokens = dec.prefix[:, 1:].view(B, K, -1)  # (B, K, L)
    return _ranked(score, length, ended, tokens, alpha, n_best, steps)


def _ranked(score: Tensor, length: Tensor, ended: Tensor, tokens: Tensor, alpha: float,
            n_best: int, steps: list) -> Generation:
    """A search's result from its hypotheses' score, length, ended (B, K) and tokens
    (B, K, L): each source's ranked by score / length ** alpha, the best and ``n_best``."""
    B, K = score.shape
    final = score / length.to(score.dtype) ** alpha  # (B, K)
    final, order = final.sort(dim=-1, descending=True)
    tokens = tokens.gather(1, order[:, :, None].expand(-1, -1, tokens.size(2)))  # (B, K, L)
    best = torch.arange(B, device=score.device) * K + order[:, 0]  # (B,) best one's row
    reasons = [STOP_EOS if e else STOP_MAX_LEN for e in ended.view(-1)[best].tolist()]
    return Generation(tokens[:, 0].clone(), length.view(-1)[best], final[:, 0], reasons,
                      nbest_tokens=tokens[:, :n_best].clone(),
                      nbest_scores=final[:, :n_best].clone(),
                      steps=[s.select(best) for s in steps])


def compacting(model, explain: int, step: Callable[..., Tensor]) -> bool:
    """Whether beam search drops a source from its batch once all its hypotheses are done
    (frozen: each row's result is unchanged, its steps no longer computed): our own model
    with the eager step (an engine's cache keeps its rows; a compiled step would compile
    again for each new batch size), and not while ``explain`` traces every row's steps."""
    return isinstance(model, EncoderDecoder) and step is decode_step and not explain


class _Finished:
    """The hypotheses of the sources that left a beam search's batch, until its end: score,
    length, ended (B, K) and tokens (B, K, L) of every source, in the order given."""

    def __init__(self, B: int, K: int, pad_id: int, device):
        self.K, self.pad_id = K, pad_id
        self.live = torch.arange(B, device=device)  # the given source of each batch row
        self.parts: list[tuple[Tensor, ...]] = []

    def add(self, over: Tensor, score: Tensor, length: Tensor, ended: Tensor,
            prefix: Tensor) -> Tensor:
        """Keep the sources ``over`` (B,) bool of the batch (their hypotheses' score, length,
        ended (B, K) and prefix (B K, 1 + t)); return the batch rows that go on."""
        gone = over.nonzero()[:, 0]
        tokens = prefix[:, 1:].view(over.numel(), self.K, -1)[gone]  # (G, K, t)
        self.parts.append((self.live[gone], score[gone], length[gone], ended[gone], tokens))
        keep = (~over).nonzero()[:, 0]
        self.live = self.live[keep]
        return keep

    def whole(self) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """(score, length, ended, tokens) of every source, tokens padded to the longest."""
        sources = torch.cat([p[0] for p in self.parts])
        order = sources.argsort()
        score, length, ended = (torch.cat([p[i] for p in self.parts])[order] for i in (1, 2, 3))
        width = max(p[4].size(2) for p in self.parts)
        tokens = torch.cat([torch.nn.functional.pad(p[4], (0, width - p[4].size(2)),
                                                    value=self.pad_id) for p in self.parts])
        return score, length, ended, tokens[order]


def _retiring(model, src, src_mask, K, limit, min_len, alpha, n_best, use_cache,
              step, bans) -> Generation:
    """Beam search as Hugging Face's ``generate(num_beams=K)`` (with ``early_stopping=False``),
    Marian and fairseq run it: a hypothesis that ends (EOS, or its source's ``max_len``) leaves
    the beam for the source's list of K finished ones, ranked by log p / |y| ** alpha, if it is
    among the K best of the step's 2 K best extensions; the beam is refilled with the K best
    extensions that did not end. A source is done once its K finished ones are all better than
    its best running hypothesis' log p / (tokens so far) ** alpha (HF's heuristic); from then
    on nothing joins its list, so (``compacting``) it leaves the batch, its list final. The
    search stops when every source is done."""
    c = model.config
    B, V, device = src.size(0), c.tgt_vocab, src.device
    L = int(limit.max())
    memory = model.encode(src, src_mask)  # (B, S, d), once
    dec = IncrementalDecoder(model, memory, src_mask, L, use_cache, step)
    dec.expand(K)  # N = B * K rows, a source's hypotheses consecutive
    running = torch.zeros(B, K, dtype=memory.dtype, device=device)  # log p of each hypothesis
    running[:, 1:] = float("-inf")  # all K start as the same start token: keep one
    done = _Done(torch.full((B, K), float("-inf"), dtype=memory.dtype, device=device),
                 torch.full((B, K, L), c.pad_id, dtype=torch.long, device=device),
                 torch.zeros(B, K, dtype=torch.long, device=device))
    result = done.subset(torch.arange(B, device=device))  # every source's, as they close
    live = torch.arange(B, device=device)  # the given source of each batch row
    open_ = torch.ones(B, dtype=torch.bool, device=device)  # may still gain finished ones
    compact = compacting(model, 0, step)
    for t in range(L):
        logp = restrict(dec.logprobs(), t, min_len, c,
                        last_step(bans[0], limit, t, K), bans[1])  # (N, V)
        cand = (running.view(-1, 1) + logp).view(B, K * V)
        top, pick = top_k(cand, 2 * K)  # (B, 2K), best first
        parent, token = pick // V, pick % V
        ends = (token == c.eos_id) | (t + 1 >= limit[:, None])  # (B, 2K)
        rows = torch.arange(B, device=device)[:, None] * K + parent  # (B, 2K) parent rows
        done.join(dec.prefix, rows, token, ends[:, :K] & open_[:, None],
                  top[:, :K] / float(t + 1) ** alpha, t, c.pad_id)
        alive = top.masked_fill(ends, float("-inf"))
        running, nxt = alive.topk(K, dim=-1)  # (B, K) the best that did not end
        dec.reorder_beams(rows.gather(1, nxt).view(-1))
        dec.append(token.gather(1, nxt).view(-1))
        best_possible = running[:, 0] / float(t + 1) ** alpha
        worst = done.score.min(dim=-1).values  # -inf while fewer than K have ended
        open_ &= (best_possible > worst) & (t + 1 < limit)
        if not bool(open_.any()):
            break
        if compact and not bool(open_.all()):  # the closed sources leave, their lists final
            result.put(live[~open_], done.subset(~open_))
            keep = open_.nonzero()[:, 0]
            running, live, limit, open_ = running[keep], live[keep], limit[keep], open_[keep]
            done = done.subset(keep)
            dec.keep_sources(keep, K)
            B = keep.numel()
    result.put(live, done)
    return result.generation(n_best, c.eos_id)


class _Done:
    """Each source's K finished hypotheses of ``_retiring``: score (B, K) log p / |y| ** alpha,
    best first (-inf: none yet), tokens (B, K, L) padded, length (B, K)."""

    def __init__(self, score: Tensor, tokens: Tensor, length: Tensor):
        self.score, self.tokens, self.length = score, tokens, length

    def subset(self, sources: Tensor) -> _Done:
        """A copy of the lists of ``sources`` (an index or a (B,) bool mask)."""
        return _Done(self.score[sources], self.tokens[sources], self.length[sources])

    def put(self, sources: Tensor, part: _Done) -> None:
        """Write ``part``'s lists as those of ``sources`` (an index)."""
        self.score[sources], self.tokens[sources], self.length[sources] = \
            part.score, part.tokens, part.length

    def join(self, prefix: Tensor, rows: Tensor, token: Tensor, joins: Tensor, score: Tensor,
             t: int, pad_id: int) -> None:
        """The step-``t`` extensions ``joins`` (B, K) (of parent ``rows`` (B, 2K) of the
        decoder's ``prefix``, by ``token`` (B, 2K), each of ``score`` (B, K)) enter the lists
        if among their K best."""
        B, K, L = self.tokens.shape
        grown = torch.cat([prefix[rows.view(-1), 1:].view(B, 2 * K, t), token[..., None]],
                          dim=-1)  # (B, 2K, t + 1)
        merged = torch.cat([self.score, score.masked_fill(~joins, float("-inf"))], dim=1)
        self.score, keep = merged.topk(K, dim=-1)  # (B, K) of the 2K
        tokens = torch.cat([self.tokens, torch.nn.functional.pad(
            grown[:, :K], (0, L - t - 1), value=pad_id)], dim=1)  # (B, 2K, L)
        self.tokens = tokens.gather(1, keep[..., None].expand(-1, -1, L))
        lengths = torch.cat([self.length, torch.full_like(self.length, t + 1)], dim=1)
        self.length = lengths.gather(1, keep)

    def generation(self, n_best: int, eos_id: int) -> Generation:
        """The search's result: each source's best and ``n_best`` finished hypotheses."""
        width = int(self.length.max())
        tokens = self.tokens[:, :, :width]
        ended = tokens.gather(2, (self.length[..., None] - 1).clamp_min(0))[..., 0] == eos_id
        reasons = [STOP_EOS if e else STOP_MAX_LEN for e in ended[:, 0].tolist()]
        return Generation(tokens[:, 0].clone(), self.length[:, 0].clone(),
                          self.score[:, 0].clone(), reasons,
                          nbest_tokens=tokens[:, :n_best].clone(),
                          nbest_scores=self.score[:, :n_best].clone())
