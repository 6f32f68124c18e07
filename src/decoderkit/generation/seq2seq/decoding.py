"""Autoregressive generation: greedy decoding and sampling, one token per step.

Seed 004's loop: encode the source once, start from BOS, run the decoder on the prefix,
read the log-probabilities at the last position, append a token, stop at EOS or max_len.
The step, its cache and its trace: ``step.py``; beam search: ``search.py``. Pad and BOS are
never generated (``limits.banned_ids``); scores are the model's own log-probabilities of the
chosen tokens, not renormalised over the tokens allowed.

Legend: B batch, N decoder rows (B, or B * beam), S source length, L generated length,
V target vocabulary.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor

from decoderkit.generation.limits import PerRow, check_int, check_sampling, logits_dtype
from decoderkit.generation.sampling import draw, generators
from decoderkit.generation.seq2seq.bounds import last_step, restrict, row_limits
from decoderkit.generation.seq2seq.step import (
    IncrementalDecoder,
    StepTrace,
    check_inputs,
    decode_step,
    record_step,
)
from decoderkit.nn.modes import evaluating
from decoderkit.nn.layers import AttentionRecord
from decoderkit.nn.seq2seq.model import EncoderDecoder

STOP_EOS, STOP_MAX_LEN = "eos", "max_len"


@dataclass
class Generation:
    """Result of a decoding call.

    tokens (B, L) long: generated ids without BOS; after a sequence's end (EOS or its own
    max_len), ``pad_id`` (never generated itself).
    lengths (B,) long: tokens generated per sequence, its EOS included.
    scores (B,): sum of the model's log-probabilities of the tokens, unrenormalised (beam
    search: divided by length ** length_penalty). stop_reasons: per sequence "eos" or "max_len".
    nbest_tokens (B, n, L) / nbest_scores (B, n): beam search's n best, best first.
    steps: per step a ``StepTrace`` of the returned sequences, when ``explain`` > 0.
    """

    tokens: Tensor
    lengths: Tensor
    scores: Tensor
    stop_reasons: list[str]
    nbest_tokens: Tensor | None = None
    nbest_scores: Tensor | None = None
    steps: list[StepTrace] = field(default_factory=list)

    def explain(self, row: int, token_str=str, source_len: int | None = None) -> list[dict]:
        """Sequence ``row``'s steps as JSON-ready dicts; ``token_str`` maps an id to text;
        ``source_len``: the row's own source length (drops the batch's padding columns)."""
        out = []
        for i, s in enumerate(self.steps[:int(self.lengths[row])]):
            tok = int(s.token[row])
            out.append({
                "step": i,
                "token": token_str(tok),
                "id": tok,
                "logprob": float(s.logprob[row]),
                "alternatives": [{"token": token_str(t), "id": t, "logprob": p} for t, p in
                                 zip(s.top_ids[row].tolist(), s.top_logprobs[row].tolist(),
                                     strict=True) if p != float("-inf")],  # (not banned)
                "self_attention": [w[row].tolist() for w in s.self_weights],
                "cross_attention": [w[row, :, :source_len].tolist() for w in s.cross_weights],
            })
        return out


def check_call(model: EncoderDecoder, src: Tensor, src_mask: Tensor | None, max_len: PerRow,
               min_len: int, explain: int, step: Callable[..., Tensor],
               ) -> tuple[Tensor, Tensor]:
    """Validate the arguments every decoding call shares; return src_mask (B, 1, S) and the
    per-row token bounds (B,) on src's device."""
    src_mask = check_inputs(model, src, src_mask, step)
    limits = row_limits(max_len, src.size(0), model.config).to(src.device)
    check_int("min_len", min_len, 0, int(limits.min()) if len(limits) else None)
    check_int("explain", explain, 0)
    return src_mask, limits


def _run(model: EncoderDecoder, src: Tensor, src_mask: Tensor | None, choose, *,
         max_len: PerRow, min_len: int, use_cache: bool, explain: int,
         step: Callable[..., Tensor], forced_eos: bool = False,
         banned: tuple[int, ...] = ()) -> Generation:
    """The shared loop of greedy decoding and sampling: ``choose(logp) -> (N,)`` picks tokens."""
    src_mask, limit = check_call(model, src, src_mask, max_len, min_len, explain, step)
    c = model.config
    with evaluating(model), torch.inference_mode():
        memory = model.encode(src, src_mask)  # (B, S, d), once
        dec = IncrementalDecoder(model, memory, src_mask, int(limit.max()), use_cache, step)
        B = src.size(0)
        ended = torch.zeros(B, dtype=torch.bool, device=src.device)  # EOS generated
        done = ended.clone()  # ended, or at its own max_len
        scores = torch.zeros(B, dtype=memory.dtype, device=src.device)
        lengths = torch.zeros(B, dtype=torch.long, device=src.device)
        steps = []
        for t in range(int(limit.max())):
            record = AttentionRecord() if explain else None
            logp = restrict(dec.logprobs(record), t, min_len, c,
                            last_step(forced_eos, limit, t), banned)  # (B, V)
            token = choose(logp).masked_fill(done, c.pad_id)  # (B,)
            scores += logp.gather(1, token[:, None])[:, 0].masked_fill(done, 0.0)
            lengths += ~done
            if explain:
                steps.append(record_step(record, logp, token, explain))
            dec.append(token)
            ended |= ~done & (token == c.eos_id)
            done = ended | (lengths >= limit)
            if bool(done.all()):
                break
    reasons = [STOP_EOS if e else STOP_MAX_LEN for e in ended.tolist()]
    return Generation(dec.prefix[:, 1:].clone(), lengths, scores, reasons, steps=steps)


def greedy_decode(model: EncoderDecoder, src: Tensor, src_mask: Tensor | None, *,
                  max_len: PerRow, min_len: int = 0, use_cache: bool = True, explain: int = 0,
                  step: Callable[..., Tensor] = decode_step, forced_eos: bool = False,
                  banned: tuple[int, ...] = ()) -> Generation:
    """Greedy decoding: y_t = argmax_v log p(v | y_<t, src), batched, each row to its own EOS.

    src (B, S) long, src_mask (B, 1, S) bool (None: from ``source_pad_id``). At most ``max_len``
    tokens (EOS included; one int, or one per row: each row then decodes as it would alone);
    EOS is forbidden before ``min_len`` tokens, pad and BOS always. ``explain`` > 0 records
    per step that many alternatives and the attention weights. ``step``: the model call of a
    step (``decode_step``, or ``decoderkit.generation.seq2seq.compiled.compile_step(model)``).
    ``forced_eos``: a row's last allowed token is EOS; ``banned``: more ids never generated
    (``bounds.restrict``).
    """
    return _run(model, src, src_mask, lambda logp: logp.argmax(dim=-1), max_len=max_len,
                min_len=min_len, use_cache=use_cache, explain=explain, step=step,
                forced_eos=forced_eos, banned=banned)


def sample(model: EncoderDecoder, src: Tensor, src_mask: Tensor | None, *, max_len: PerRow,
           min_len: int = 0, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0,
           seed: PerRow | None = None, use_cache: bool = True, explain: int = 0,
           step: Callable[..., Tensor] = decode_step, forced_eos: bool = False,
           banned: tuple[int, ...] = ()) -> Generation:
    """Ancestral sampling from softmax(logp / temperature), filtered by top-k then top-p.

    Seedable: the same ``seed`` gives the same tokens (private ``torch.Generator``s; one
    seed per row makes each row sample as it would alone with its seed). Draws invert each
    row's cumulative distribution at one uniform number (``draw``), which picks v with
    probability p_v. Pad and BOS (and ``banned``) have p = 0. Scores are the model's own
    (unfiltered) log-probabilities. ``temperature`` and ``top_p`` must be normal numbers of
    the model's dtype (``limits.check_sampling``).
    """
    check_sampling(temperature, top_k, top_p, logits_dtype(model))
    src_mask = check_inputs(model, src, src_mask, step)
    gens = generators(seed, src.size(0), src.device)

    def choose(logp: Tensor) -> Tensor:
        return draw(logp, gens, temperature, top_k, top_p)

    return _run(model, src, src_mask, choose, max_len=max_len, min_len=min_len,
                use_cache=use_cache, explain=explain, step=step, forced_eos=forced_eos,
                banned=banned)
