"""One decoding step and what it records: the model call, the incremental decoder holding the
prefix and its cache, and the per-step trace of ``explain``.

With ``use_cache`` the prefix is not re-run: each step feeds only the newest token at its
position (``KVCache.at``), and the model's ``DecoderCache`` supplies the earlier
self-attention keys/values and the cross-attention keys/values projected from ``memory``
once. Without it the whole prefix is recomputed every step (the reference the cache is
tested against). The loops that use these: ``decoding.py`` (greedy, sampling) and
``search.py`` (beam search).

Legend: N decoder rows (B, or B * beam), S source length, t prefix length, V target
vocabulary, h heads, k alternatives per step.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import torch
from torch import Tensor

from decoderkit.base.errors import UsageError
from decoderkit.nn.cache import At
from decoderkit.nn.layers import AttentionRecord
from decoderkit.nn.masks import causal_mask, padding_mask
from decoderkit.nn.seq2seq.model import DecoderCache, EncoderDecoder, ModelConfig


def decode_step(model: EncoderDecoder, memory: Tensor, src_mask: Tensor | None, tgt: Tensor,
                tgt_mask: Tensor | None, cache: DecoderCache | None, at: At | None = None,
                record: AttentionRecord | None = None) -> Tensor:
    """One model call of a decoding step: tgt (N, t) ids -> (N, V) log p(next token), read at
    the decoder's last position (seed 004). With a cache, tgt holds only the new positions,
    at ``at``'s positions; ``record`` gets the attention weights.
    ``decoderkit.generation.seq2seq.compiled.compile_step`` wraps this function in
    torch.compile."""
    x = model.decode(memory, src_mask, tgt, tgt_mask, cache, record, at)  # (N, t, d)
    return model.generator(x[:, -1])  # (N, V)


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


class IncrementalDecoder:
    """The decoder side of generation for N rows: the prefix and, optionally, its cache.

    ``logprobs()`` gives (N, V) log-probabilities of the next token after the prefix;
    ``append(tokens)`` grows the prefix by one; ``expand(K)`` and ``reorder_beams(index)``
    serve beam search. With ``use_cache`` only new positions are run through the decoder.
    ``step`` is the model call, ``decode_step`` or a compiled one with its signature.
    """

    def __init__(self, model: EncoderDecoder, memory: Tensor, src_mask: Tensor | None,
                 max_len: int, use_cache: bool, step: Callable[..., Tensor] = decode_step):
        self.model, self.memory, self.src_mask, self.step = model, memory, src_mask, step
        if src_mask is not None and bool(src_mask.all()):
            self.src_mask = None  # nothing to hide: attention skips the mask work, same result
        N = memory.size(0)
        self.prefix = memory.new_full((N, 1), model.config.bos_id, dtype=torch.long)  # (N, t)
        self.cache = model.new_cache(memory, max_len) if use_cache else None
        self.cached = 0  # prefix positions in the cache

    def logprobs(self, record: AttentionRecord | None = None) -> Tensor:
        """(N, V) log p(next | prefix, source): the decoder's last position, seed 004.

        ``record`` gets the step's attention weights (see ``last_position``)."""
        t = self.prefix.size(1)
        if self.cache is None:
            return self.step(self.model, self.memory, self.src_mask, self.prefix,
                             causal_mask(t, device=self.prefix.device), None, None, record)
        # only positions not yet cached, at their positions; each sees every cached one.
        # contiguous: a compiled step would otherwise see a new stride (t) every step
        tgt, at = self.prefix[:, self.cached:].contiguous(), \
            self.cache.self_kv.at(self.cached, t - self.cached)  # (N, t'), positions
        self.cached = t
        return self.step(self.model, self.memory, self.src_mask, tgt, None, self.cache, at,
                         record)  # (N, V)

    def append(self, tokens: Tensor) -> None:
        """Add the chosen tokens (N,) to every row's prefix."""
        self.prefix = torch.cat([self.prefix, tokens[:, None]], dim=1)  # (N, t + 1)

    def expand(self, beam: int) -> None:
        """Give each of the B sources ``beam`` consecutive rows, copies of its own (N = B beam).

        With the cache, cross-attention keys/values stay one row per source: its hypotheses
        share them (``nn.attend.attend_shared``), so they are neither copied nor read
        ``beam`` times a step.
        """
        index = torch.arange(self.prefix.size(0), device=self.prefix.device)
        index = index.repeat_interleave(beam)  # (N,) source of each row
        self.prefix = self.prefix.index_select(0, index)
        if self.cache is not None:
            self.cache.reorder(index, self.cached)
        else:  # recomputation reads memory per row
            self.memory = self.memory.index_select(0, index)  # (N, S, d)
            if self.src_mask is not None:
                self.src_mask = self.src_mask.index_select(0, index)  # (N, 1, S)

    def keep_sources(self, sources: Tensor, beam: int) -> None:
        """Keep the ``beam`` rows of each source ``sources`` (B',) only (beam search: the
        sources whose hypotheses are all done leave the batch): prefix, memory, mask, cache."""
        rows = (sources[:, None] * beam + torch.arange(beam, device=sources.device)).view(-1)
        self.prefix = self.prefix.index_select(0, rows)
        per_row = self.cache is None  # recomputation reads memory per row
        self.memory = self.memory.index_select(0, rows if per_row else sources)
        if self.src_mask is not None:
            self.src_mask = self.src_mask.index_select(0, rows if per_row else sources)
        if self.cache is not None:
            self.cache.reorder(rows, self.cached, sources)

    def reorder_beams(self, index: Tensor) -> None:
        """Keep rows ``index``, each taken from a row of the same source (beam parents):
        cross-attention keys/values, equal across a source's rows, are not copied."""
        self.prefix = self.prefix.index_select(0, index)
        if self.cache is not None:
            self.cache.reorder(index, self.cached)


def last_position(record: AttentionRecord) -> tuple[list[Tensor], list[Tensor]]:
    """A step's recorded weights at its last (newest) position, per layer: self (N, h, t),
    cross (N, h, S)."""
    return ([w[:, :, -1] for w in record.self_attn], [w[:, :, -1] for w in record.cross_attn])


def record_step(record: AttentionRecord | None, logp: Tensor, token: Tensor, k: int,
                rows: Tensor | None = None) -> StepTrace:
    """A ``StepTrace`` of this step: top-k of ``logp`` (N, V) and the weights in ``record``
    (none if None). rows (N,): the row each taken token extends (beam search's parents);
    None: the same row."""
    self_w, cross_w = last_position(record) if record is not None else ([], [])
    if rows is not None:
        logp = logp.index_select(0, rows)
        self_w, cross_w = ([w.index_select(0, rows) for w in ws] for ws in (self_w, cross_w))
    top = logp.topk(min(k, logp.size(-1)), dim=-1)
    logprob = logp.gather(1, token[:, None])[:, 0]
    return StepTrace(top.indices, top.values, token, logprob, self_w, cross_w)


@runtime_checkable
class Engine(Protocol):
    """A model run by another runtime (``decoderkit.interop``, e.g. ONNX Runtime), decoded by
    the same loops: ``encode`` gives what its ``step`` reads of the source (``memory``),
    ``new_cache`` its ``DecoderCache``; ``step`` has ``decode_step``'s signature and is
    passed as ``step=engine.step``."""

    config: ModelConfig
    training: bool
    engine: str  # as --engine names it: its row of ``generation.engines.UNAVAILABLE``

    def encode(self, src: Tensor, src_mask: Tensor | None = None) -> Tensor: ...
    def new_cache(self, memory: Tensor, max_len: int): ...
    def step(self, model, memory, src_mask, tgt, tgt_mask, cache, at=None,
             record=None) -> Tensor: ...
    def eval(self): ...
    def train(self, mode: bool = True): ...


def check_inputs(model: EncoderDecoder | Engine, src: Tensor, src_mask: Tensor | None,
                 step: Callable[..., Tensor] = decode_step) -> Tensor:
    """Validate a decoding call's model, source and step; return src_mask (B, 1, S), built
    from pad if None."""
    if isinstance(model, Engine):
        if step != model.step:
            raise UsageError(f"{type(model).__name__} decodes with its own step: "
                             f"pass step=model.step")
    elif not isinstance(model, EncoderDecoder):
        raise TypeError(f"model must be an EncoderDecoder, got {type(model).__name__}")
    if not callable(step):
        raise TypeError(f"step must be callable like decode_step, got {type(step).__name__}")
    if not isinstance(src, Tensor) or src.dim() != 2 or src.dtype != torch.long \
            or src.size(0) == 0:
        shape = tuple(src.shape) if isinstance(src, Tensor) else type(src).__name__
        raise UsageError(f"src must be a (B, S) long tensor with B >= 1, got {shape}")
    B, S = src.shape
    if src_mask is None:
        return padding_mask(src, model.config.source_pad_id)
    if not isinstance(src_mask, Tensor):
        raise TypeError(f"src_mask must be a bool tensor or None, got {type(src_mask).__name__}")
    if src_mask.dtype != torch.bool or tuple(src_mask.shape) != (B, 1, S):
        raise UsageError(f"src_mask must be a bool tensor of shape {(B, 1, S)}, "
                         f"got {src_mask.dtype} {tuple(src_mask.shape)}")
    return src_mask
