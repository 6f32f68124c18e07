"""Autoregressive generation: the incremental decoder, greedy decoding and sampling.

Seed 004's loop: encode the source once, start from BOS, run the decoder on the prefix,
read the log-probabilities at the last position, append a token, stop at EOS or max_len.
With ``use_cache`` the prefix is not re-run: each step feeds only the newest token, and the
model's ``DecoderCache`` supplies the earlier self-attention keys/values and the
cross-attention keys/values projected from ``memory`` once. Without it the whole prefix is
recomputed every step (the reference the cache is tested against). Beam search: ``search.py``.

Legend: B batch, N decoder rows (B, or B * beam), S source length, t prefix length,
L generated length, V target vocabulary, h heads, k alternatives per step.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from torch import Tensor

from decoderkit.base.errors import UsageError
from decoderkit.nn.masks import causal_mask, padding_mask
from decoderkit.nn.model import DecoderCache, EncoderDecoder

STOP_EOS, STOP_MAX_LEN = "eos", "max_len"


@dataclass
class StepTrace:
    """What one decoding step saw, for N rows (``explain`` > 0).

    top_ids/top_logprobs (N, k): the k most likely next tokens; token (N,) the one taken,
    logprob (N,) its log-probability.
    self_weights: per layer (N, h, t) over the prefix; cross_weights: per layer (N, h, S).
    """

    top_ids: Tensor
    top_logprobs: Tensor
    token: Tensor
    logprob: Tensor
    self_weights: list[Tensor]
    cross_weights: list[Tensor]

    def select(self, index: Tensor) -> StepTrace:
        """Rows ``index`` of every field (beam search follows each hypothesis' ancestry)."""
        def pick(tensors: list[Tensor]) -> list[Tensor]:
            return [x.index_select(0, index) for x in tensors]

        return StepTrace(*pick([self.top_ids, self.top_logprobs, self.token, self.logprob]),
                         pick(self.self_weights), pick(self.cross_weights))


@dataclass
class Generation:
    """Result of a decoding call.

    tokens (B, L) long: generated ids without BOS; after a sequence's EOS, ``pad_id``.
    lengths (B,) long: tokens generated per sequence, its EOS included.
    scores (B,): sum of the model's log-probabilities of the tokens (beam search: divided
    by length ** length_penalty). stop_reasons: per sequence "eos" or "max_len".
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

    def explain(self, row: int, token_str=str) -> list[dict]:
        """Sequence ``row``'s steps as JSON-ready dicts; ``token_str`` maps an id to text."""
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
                                     strict=True)],
                "self_attention": [w[row].tolist() for w in s.self_weights],
                "cross_attention": [w[row].tolist() for w in s.cross_weights],
            })
        return out


def decode_step(model: EncoderDecoder, memory: Tensor, src_mask: Tensor | None, tgt: Tensor,
                tgt_mask: Tensor | None, cache: DecoderCache | None,
                need_weights: bool = False) -> Tensor:
    """One model call of a decoding step: tgt (N, t) ids -> (N, V) log p(next token), read at
    the decoder's last position (seed 004). With a cache, tgt holds only the new positions.
    ``decoderkit.generation.compiled.compile_step`` wraps this function in torch.compile."""
    x = model.decode(memory, src_mask, tgt, tgt_mask, cache, need_weights)  # (N, t, d)
    return model.generator(x[:, -1])  # (N, V)


class IncrementalDecoder:
    """The decoder side of generation for N rows: the prefix and, optionally, its cache.

    ``logprobs()`` gives (N, V) log-probabilities of the next token after the prefix;
    ``append(tokens)`` grows the prefix by one; ``expand(K)`` and ``reorder_beams(index)``
    serve beam search. With ``use_cache`` only new positions are run through the decoder.
    ``step`` is the model call, ``decode_step`` or a compiled one with its signature.
    """

    def __init__(self, model: EncoderDecoder, memory: Tensor, src_mask: Tensor | None,
                 max_len: int, use_cache: bool, need_weights: bool = False,
                 step: Callable[..., Tensor] = decode_step):
        self.model, self.memory, self.src_mask = model, memory, src_mask
        self.need_weights, self.step = need_weights, step
        if src_mask is not None and bool(src_mask.all()):
            self.src_mask = None  # nothing to hide: attention skips the mask work, same result
        N = memory.size(0)
        self.prefix = memory.new_full((N, 1), model.config.bos_id, dtype=torch.long)  # (N, t)
        self.cache = model.new_cache(memory, max_len) if use_cache else None

    def logprobs(self) -> Tensor:
        """(N, V) log p(next | prefix, source): the decoder's last position, seed 004."""
        if self.cache is None:
            t = self.prefix.size(1)
            tgt, tgt_mask = self.prefix, causal_mask(t, device=self.prefix.device)  # (t, t)
        else:  # only positions not yet cached; each sees every cached position
            # contiguous: a compiled step would otherwise see a new stride (t) every step
            tgt, tgt_mask = self.prefix[:, self.cache.length:].contiguous(), None  # (N, 1)
        return self.step(self.model, self.memory, self.src_mask, tgt, tgt_mask, self.cache,
                         self.need_weights)  # (N, V)

    def attention_weights(self) -> tuple[list[Tensor], list[Tensor]]:
        """The last step's weights per layer: self (N, h, t), cross (N, h, S)."""
        layers = self.model.decoder.layers
        return ([layer.self_weights[:, :, -1] for layer in layers],
                [layer.cross_weights[:, :, -1] for layer in layers])

    def append(self, tokens: Tensor) -> None:
        """Add the chosen tokens (N,) to every row's prefix."""
        self.prefix = torch.cat([self.prefix, tokens[:, None]], dim=1)  # (N, t + 1)

    def expand(self, beam: int) -> None:
        """Give each of the B sources ``beam`` consecutive rows, copies of its own (N = B beam).

        With the cache, cross-attention keys/values stay one row per source: its hypotheses
        share them (``MultiHeadAttention.group_size``), so they are neither copied nor
        read ``beam`` times a step.
        """
        index = torch.arange(self.prefix.size(0), device=self.prefix.device)
        index = index.repeat_interleave(beam)  # (N,) source of each row
        self.prefix = self.prefix.index_select(0, index)
        if self.cache is not None:
            self.cache.reorder(index, cross=False)
        else:  # recomputation reads memory per row
            self.memory = self.memory.index_select(0, index)  # (N, S, d)
            if self.src_mask is not None:
                self.src_mask = self.src_mask.index_select(0, index)  # (N, 1, S)

    def reorder_beams(self, index: Tensor) -> None:
        """Keep rows ``index``, each taken from a row of the same source (beam parents):
        cross-attention keys/values, equal across a source's rows, are not copied."""
        self.prefix = self.prefix.index_select(0, index)
        if self.cache is not None:
            self.cache.reorder(index, cross=False)


def check_inputs(model: EncoderDecoder, src: Tensor, src_mask: Tensor | None, max_len: int,
                 min_len: int, step: Callable[..., Tensor] = decode_step) -> Tensor:
    """Validate a decoding call's arguments; return src_mask (B, 1, S), built from pad if None."""
    if not isinstance(model, EncoderDecoder):
        raise TypeError(f"model must be an EncoderDecoder, got {type(model).__name__}")
    if not callable(step):
        raise TypeError(f"step must be callable like decode_step, got {type(step).__name__}")
    if not isinstance(src, Tensor) or src.dim() != 2 or src.dtype != torch.long:
        shape = tuple(src.shape) if isinstance(src, Tensor) else type(src).__name__
        raise UsageError(f"src must be a (B, S) long tensor, got {shape}")
    B, S = src.shape
    if src_mask is None:
        src_mask = padding_mask(src, model.config.pad_id)
    elif not isinstance(src_mask, Tensor):
        raise TypeError(f"src_mask must be a bool tensor or None, got {type(src_mask).__name__}")
    elif src_mask.dtype != torch.bool or tuple(src_mask.shape) != (B, 1, S):
        raise UsageError(f"src_mask must be a bool tensor of shape {(B, 1, S)}, "
                         f"got {src_mask.dtype} {tuple(src_mask.shape)}")
    for name, value, low in (("max_len", max_len, 1), ("min_len", min_len, 0)):
        if not isinstance(value, int) or isinstance(value, bool) or value < low:
            raise UsageError(f"{name} must be an int >= {low}, got {value!r}")
    if min_len > max_len:
        raise UsageError(f"min_len must be <= max_len, got min_len={min_len}, max_len={max_len}")
    if max_len > model.config.max_len:
        raise UsageError(f"max_len must be <= the model's max_len {model.config.max_len}, "
                         f"got {max_len}")
    return src_mask


@contextmanager
def evaluating(model: EncoderDecoder) -> Iterator[EncoderDecoder]:
    """Eval mode (no dropout) inside the block; the model's previous mode after it."""
    was_training = model.training
    model.eval()
    try:
        yield model
    finally:
        model.train(was_training)


def block_eos(logp: Tensor, step: int, min_len: int, eos_id: int) -> Tensor:
    """Forbid EOS while fewer than ``min_len`` tokens would have been generated."""
    if step + 1 < min_len:
        logp = logp.clone()
        logp[:, eos_id] = float("-inf")
    return logp


def record_step(dec: IncrementalDecoder, logp: Tensor, token: Tensor, k: int,
                rows: Tensor | None = None) -> StepTrace:
    """A ``StepTrace`` of this step: top-k of ``logp`` (N, V) and, if asked, the weights.

    rows (N,): the row each taken token extends (beam search's parents); None: the same row.
    """
    self_w, cross_w = dec.attention_weights() if dec.need_weights else ([], [])
    if rows is not None:
        logp = logp.index_select(0, rows)
        self_w, cross_w = ([w.index_select(0, rows) for w in ws] for ws in (self_w, cross_w))
    top = logp.topk(min(k, logp.size(-1)), dim=-1)
    logprob = logp.gather(1, token[:, None])[:, 0]
    return StepTrace(top.indices, top.values, token, logprob, self_w, cross_w)


def _run(model: EncoderDecoder, src: Tensor, src_mask: Tensor | None, choose, *, max_len: int,
         min_len: int, use_cache: bool, explain: int, step: Callable[..., Tensor]) -> Generation:
    """The shared loop of greedy decoding and sampling: ``choose(logp) -> (N,)`` picks tokens."""
    src_mask = check_inputs(model, src, src_mask, max_len, min_len, step)
    c = model.config
    with evaluating(model), torch.inference_mode():
        memory = model.encode(src, src_mask)  # (B, S, d), once
        dec = IncrementalDecoder(model, memory, src_mask, max_len, use_cache, explain > 0, step)
        B = src.size(0)
        done = torch.zeros(B, dtype=torch.bool, device=src.device)
        scores = torch.zeros(B, dtype=memory.dtype, device=src.device)
        lengths = torch.zeros(B, dtype=torch.long, device=src.device)
        steps = []
        for step in range(max_len):
            logp = block_eos(dec.logprobs(), step, min_len, c.eos_id)  # (B, V)
            token = choose(logp).masked_fill(done, c.pad_id)  # (B,)
            scores += logp.gather(1, token[:, None])[:, 0].masked_fill(done, 0.0)
            lengths += ~done
            if explain:
                steps.append(record_step(dec, logp, token, explain))
            dec.append(token)
            done |= token == c.eos_id
            if bool(done.all()):
                break
    reasons = [STOP_EOS if d else STOP_MAX_LEN for d in done.tolist()]
    return Generation(dec.prefix[:, 1:].clone(), lengths, scores, reasons, steps=steps)


def greedy_decode(model: EncoderDecoder, src: Tensor, src_mask: Tensor | None, *, max_len: int,
                  min_len: int = 0, use_cache: bool = True, explain: int = 0,
                  step: Callable[..., Tensor] = decode_step) -> Generation:
    """Greedy decoding: y_t = argmax_v log p(v | y_<t, src), batched, each row to its own EOS.

    src (B, S) long, src_mask (B, 1, S) bool (None: from ``pad_id``). At most ``max_len``
    tokens (EOS included); EOS is forbidden before ``min_len`` tokens. ``explain`` > 0
    records per step that many alternatives and the attention weights. ``step``: the model
    call of a step (``decode_step``, or ``decoderkit.generation.compiled.compile_step(model)``).
    """
    return _run(model, src, src_mask, lambda logp: logp.argmax(dim=-1), max_len=max_len,
                min_len=min_len, use_cache=use_cache, explain=explain, step=step)


def filter_logits(logits: Tensor, top_k: int = 0, top_p: float = 1.0) -> Tensor:
    """Keep the ``top_k`` largest logits (0: all), then the smallest set whose probability
    reaches ``top_p`` (nucleus); the rest become -inf. logits (N, V)."""
    if top_k > 0 and top_k < logits.size(-1):
        kth = logits.topk(top_k, dim=-1).values[:, -1:]  # (N, 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = logits.sort(dim=-1, descending=True)  # (N, V)
        probs = sorted_logits.softmax(dim=-1)
        before = probs.cumsum(dim=-1) - probs  # mass of strictly more likely tokens
        drop_sorted = before >= top_p  # the most likely token is always kept
        drop = torch.empty_like(drop_sorted).scatter_(1, order, drop_sorted)  # unsort
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def check_sampling(temperature: float, top_k: int, top_p: float) -> None:
    """Raise ValueError naming a sampling setting out of range."""
    if not temperature > 0:
        raise UsageError(f"temperature must be > 0, got {temperature}")
    if not isinstance(top_k, int) or top_k < 0:
        raise UsageError(f"top_k must be an int >= 0, got {top_k!r}")
    if not 0.0 < top_p <= 1.0:
        raise UsageError(f"top_p must be in (0, 1], got {top_p}")


def sample(model: EncoderDecoder, src: Tensor, src_mask: Tensor | None, *, max_len: int,
           min_len: int = 0, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0,
           seed: int | None = None, use_cache: bool = True, explain: int = 0,
           step: Callable[..., Tensor] = decode_step) -> Generation:
    """Ancestral sampling from softmax(logp / temperature), filtered by top-k then top-p.

    Seedable: the same ``seed`` gives the same tokens (a private ``torch.Generator``).
    Draws use the exponential race, argmax_v p_v / E_v with E_v ~ Exp(1), which picks v
    with probability p_v. Scores are the model's own (unfiltered) log-probabilities.
    """
    check_sampling(temperature, top_k, top_p)
    gen = torch.Generator(device=src.device)
    if seed is None:
        gen.seed()  # a fresh non-deterministic seed, this generator only
    else:
        gen.manual_seed(seed)

    def choose(logp: Tensor) -> Tensor:
        probs = filter_logits(logp / temperature, top_k, top_p).softmax(dim=-1)  # (N, V)
        race = torch.empty_like(probs).exponential_(generator=gen).clamp_min_(1e-30)
        return (probs / race).argmax(dim=-1)

    return _run(model, src, src_mask, choose, max_len=max_len, min_len=min_len,
                use_cache=use_cache, explain=explain, step=step)
