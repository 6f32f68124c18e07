"""Continuous batching of a decoder-only LM: rows join, step together and leave.

A ``Row`` is one sequence being generated, with its own ``Settings`` and sampling state (its
own ``torch.Generator``, penalty counts, ``StopText``). ``Rows`` steps every running row at
once: one forward of their new tokens on a ``RowsCache`` (row i's keys and values in slot i
of one shared buffer per layer, each row of its own length), then every row's next token is
chosen from its own logits, all rows in one call (``lm_choose``). A row joins with a prefill
of its prompt alone into the next free slot; it leaves when it stops (an end-of-text id, a
stop sequence, its token budget) or is dropped (its client left), and the last row moves into
its slot (the running rows fill the first slots). A row whose cache has reached the context C
continues on the last C tokens, prefilled afresh (nanoGPT's crop, as ``generation.lm``).

Each row's arithmetic is independent of its companions with a ``rowwise`` model or the int8
copy: the linears compute each row alike for any row count (``generation.rowwise``; int8: a
scale per row, ``generation.int8.RowScaledInt8``), attention of all rows at once computes
each row alike for any companions (``nn.rows_cache.RowsKVCache``: the reference attention over
a window of whole ``ROWS_CHUNK``s, unfilled positions masked), norms and activations are per
position, and penalties,
filters and the draw work on the row's own logits with its own generator, op by op row by
row (one uniform number per row): no reduction over the batch.

Legend: B running rows, L prompt length, C context length, V vocabulary.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor

from decoderkit.base.checks import SEED_MAX
from decoderkit.base.errors import UsageError
from decoderkit.generation.decoding import generators
from decoderkit.generation.limits import check_int, check_sampling, logits_dtype
from decoderkit.generation.lm_choose import choose
from decoderkit.generation.step import evaluating
from decoderkit.generation.stops import Decode, StopText, check_stops
from decoderkit.nn.lm import DecoderOnlyLM, RowsCache

FINISH_STOP, FINISH_LENGTH = "stop", "length"  # OpenAI's finish_reason values
OnChosen = Callable[[list[tuple["Row", "Token"]]], object]  # a step's tokens, once chosen
SCORE_CHUNK = 64  # prompt positions scored per head product (bounds the (chunk, V) logits)


@dataclass(frozen=True)
class Settings:
    """How one row is generated; checked when built."""

    max_new_tokens: int  # tokens to generate at most (0: the prompt is only scored)
    greedy: bool = False  # argmax of the adjusted logits instead of a draw
    temperature: float = 1.0  # draws from softmax(adjusted logits / temperature)
    top_k: int = 0  # draws from the k most likely only (0: all)
    top_p: float = 1.0  # draws from the smallest set with this mass (1: all)
    seed: int | None = None  # the row's own generator's seed (None: a fresh one)
    presence_penalty: float = 0.0  # subtracted from the logit of each token generated so far
    frequency_penalty: float = 0.0  # subtracted once per time a token was generated
    logit_bias: tuple[tuple[int, float], ...] = ()  # (token id, added to its logit)
    eos_ids: frozenset[int] = frozenset()  # end-of-text ids: once generated, the row stops
    stop: tuple[str, ...] = ()  # stop sequences (text, needs a decode): never in the text
    logprobs: int | None = None  # None: no log-probs; N: each token's and the N most likely
    prompt_logprobs: bool = False  # also score the prompt's tokens (OpenAI's echo)

    def __post_init__(self):
        check_int("max_new_tokens", self.max_new_tokens, 0)
        if not isinstance(self.greedy, bool):
            raise UsageError(f"greedy must be a bool, got {self.greedy!r}")
        if not self.greedy:
            check_sampling(self.temperature, self.top_k, self.top_p)
        if self.seed is not None:
            check_int("seed", self.seed, 0, SEED_MAX)
        for name in ("presence_penalty", "frequency_penalty"):
            if not math.isfinite(getattr(self, name)):
                raise UsageError(f"{name} must be finite, got {getattr(self, name)!r}")
        if self.logprobs is not None:
            check_int("logprobs", self.logprobs, 0)
        object.__setattr__(self, "stop", check_stops(self.stop))


@dataclass
class Token:
    """One chosen token as a client sees it."""

    id: int
    text: str  # the text settled with it ("" while a stop may begin or a character is cut)
    logprob: float | None = None  # the model's own log p of it (before penalties, temperature)
    top: list[tuple[int, float]] | None = None  # the N most likely (id, log p), best first
    finish_reason: str | None = None  # set on the row's last token


@dataclass
class Row:
    """One sequence being generated: its prompt, settings and state."""

    prompt: list[int]
    settings: Settings
    decode: Decode | None = None  # ids -> text; needed by stop sequences
    tokens: list[int] = field(default_factory=list)  # chosen so far
    finish_reason: str | None = None  # "stop" or "length" once finished
    prompt_scores: list[Token] = field(default_factory=list)  # with prompt_logprobs
    _logits: Tensor | None = None  # (1, V): the next token's
    _counts: Tensor | None = None  # (1, V): times each token was generated (penalties)
    _text: StopText | None = None
    _gens: list[torch.Generator] | None = None

    def __post_init__(self):
        if self.settings.stop and self.decode is None:
            raise UsageError("stop sequences need a decode function (ids -> text)")
        if self.decode is not None:
            self._text = StopText(self.decode, self.settings.stop)

    @property
    def generated(self) -> list[int]:
        """The chosen ids through an end-of-text, cut before a stop sequence (the ids wholly
        before it)."""
        if self._text is not None and self._text.stopped:
            return self.tokens[:self._text.kept]
        return list(self.tokens)

    @property
    def output(self) -> list[int]:
        """``generated`` without an end-of-text: the ids of the text a client sees."""
        out = self.generated
        return out[:-1] if out and out[-1] in self.settings.eos_ids else out

    @property
    def text(self) -> str:
        """The final text so far (with a decode)."""
        return "" if self._text is None else self._text.text

    def end(self, reason: str) -> Token:
        """Finish the row for ``reason`` with no further token (an engine's stream ended):
        the held-back text as a last piece, id -1."""
        self.finish_reason = reason
        return Token(-1, "" if self._text is None else self._text.flush(),
                     finish_reason=reason)

    def take(self, token: int, logprob: float | None = None,
             top: list[tuple[int, float]] | None = None) -> Token:
        """Append the chosen ``token``: its settled text, and whether the row has finished
        (an end-of-text id, a stop sequence, the token budget). Whatever engine chose it."""
        s, out = self.settings, Token(token, "", logprob, top)
        self.tokens.append(token)
        end = token in s.eos_ids
        if self._text is not None and not end:
            out.text = self._text.push(token)
        if end or (self._text is not None and self._text.stopped):
            self.finish_reason = FINISH_STOP
        elif len(self.tokens) == s.max_new_tokens:
            self.finish_reason = FINISH_LENGTH
        if self.finish_reason is not None and self._text is not None:
            out.text += self._text.flush()
        out.finish_reason = self.finish_reason
        return out


class Rows:
    """The running rows of one model; ``join`` (prefill), ``step`` (everyone), ``drop``."""

    def __init__(self, model: DecoderOnlyLM):
        if not isinstance(model, DecoderOnlyLM):
            raise TypeError(f"model must be a DecoderOnlyLM, got {type(model).__name__}")
        self.model = model
        self.running: list[Row] = []  # running[i]'s keys and values are in slot i
        weight = model.embed.lut.weight
        self.device, self.dtype = weight.device, logits_dtype(model)
        self.cache = RowsCache(model, weight.dtype, self.device)

    def join(self, row: Row) -> None:
        """Prefill ``row``'s prompt alone (scoring it if asked); it runs from the next
        ``step``, or finishes at once with ``max_new_tokens`` 0."""
        s = row.settings
        check_sampling(s.temperature, s.top_k, s.top_p, None if s.greedy else self.dtype)
        C = self.model.config.max_len
        with evaluating(self.model), torch.inference_mode():
            row._gens = None if s.greedy else generators(s.seed, 1, self.device)
            prompt = row.prompt[-C:]
            if s.max_new_tokens:
                h = self._prefill(len(self.running), row, prompt)
            else:
                h = self.model.features(torch.tensor([prompt], device=self.device))[0]
            if s.prompt_logprobs:
                row.prompt_scores = self._score(prompt, h, s.logprobs)
        if s.max_new_tokens:
            self.running.append(row)
        else:
            row.finish_reason = FINISH_LENGTH

    def warm_up(self) -> None:
        """A throwaway prefill and step, run by the thread that will step the rows (the
        server's worker, at start-up): its OpenMP team and oneDNN's kernels are made before a
        first request would pay for them (about a second here)."""
        rows = [Row([0, 0], Settings(3, greedy=True)) for _ in range(2)]
        for row in rows:
            self.join(row)
        self.step()
        for row in rows:
            self.drop(row)

    def drop(self, row: Row) -> None:
        """Take ``row`` out (its client is gone); a no-op for a row not running."""
        if row in self.running:
            with torch.inference_mode():  # the cache's buffers are inference tensors
                self._leave(self.running.index(row))

    def _leave(self, i: int) -> None:
        """Running row i leaves; the last running row takes its place (and slot)."""
        last = len(self.running) - 1
        if i != last:
            self.cache.move(last, i)
            self.running[i] = self.running[last]
        self.running.pop()

    def step(self, on_chosen: OnChosen | None = None) -> list[tuple[Row, Token]]:
        """Every running row chooses one token (``lm_choose.choose``: all at once, each from
        its own logits); finished rows leave, the others advance.
        Returns (row, token) for each row that ran, in order; ``on_chosen(events)`` gets
        them as soon as they are chosen, before the forward that prepares the next step (a
        stream shows a token one forward sooner)."""
        with evaluating(self.model), torch.inference_mode():
            rows = list(self.running)
            chosen = choose(torch.cat([r._logits for r in rows]), [r.settings for r in rows],
                            [r._gens for r in rows],
                            [None if r._counts is None else r._counts[0] for r in rows])
            events = [(row, self._take(row, token))
                      for row, token in zip(rows, chosen, strict=True)]
            if on_chosen is not None:
                on_chosen(events)
            for i in reversed(range(len(rows))):
                if rows[i].finish_reason is not None:
                    self._leave(i)
            self._advance()
        return events

    def _take(self, row: Row, token: int) -> Token:
        """The row takes its chosen ``token``: its log-probs if asked, its penalty counts."""
        s, logits = row.settings, row._logits
        logprob, top = _logprobs(logits[0], token, s.logprobs) if s.logprobs is not None \
            else (None, None)
        if s.presence_penalty or s.frequency_penalty:
            if row._counts is None:
                row._counts = torch.zeros_like(logits)
            row._counts[0, token] += 1
        return row.take(token, logprob, top)

    def _advance(self) -> None:
        """The running rows' last tokens through the model: together on the ``RowsCache``;
        a row whose cache is full (the context) moves to the last slots and continues alone
        on its last C tokens."""
        C, lengths = self.model.config.max_len, self.cache.lengths
        B = len(self.running)
        for i in reversed(range(B)):
            if lengths[i] == C:  # to slot B-1, whose row takes slot i (the full one's is redone)
                B -= 1
                if i != B:
                    self.cache.move(B, i)
                    self.running[i], self.running[B] = self.running[B], self.running[i]
                row = self.running[B]
                self._prefill(B, row, (row.prompt + row.tokens)[-C:])
        if not B:
            return
        ids = torch.tensor([[r.tokens[-1]] for r in self.running[:B]], device=self.device)
        h = self.model.features(ids, self.cache)  # (B, 1, d)
        logits = self.model.logits(h[:, 0])  # (B, V)
        for i, row in enumerate(self.running[:B]):
            row._logits = logits[i:i + 1]

    def _prefill(self, slot: int, row: Row, ids: list[int]) -> Tensor:
        """``ids`` (at most C) into the cache's ``slot``, and the row's next-token logits;
        returns the final hidden states (len(ids), d)."""
        cache = self.cache.slot(slot)
        h = self.model.features(torch.tensor([ids], device=self.device), cache)
        self.cache.filled(slot, cache)
        row._logits = self.model.logits(h[:, -1])  # (1, V)
        return h[0]

    def _score(self, prompt: list[int], h: Tensor, top: int | None) -> list[Token]:
        """Each prompt token's log p given the tokens before it (the first has none), from
        the model's log-softmax over the hidden states h (L, d), in chunks of positions."""
        scores = [Token(prompt[0], "")]
        for start in range(0, len(prompt) - 1, SCORE_CHUNK):
            logits = self.model.logits(h[start:start + SCORE_CHUNK])  # (chunk, V)
            for j, row_logits in enumerate(logits[:len(prompt) - 1 - start]):
                token = prompt[start + j + 1]
                logprob, best = _logprobs(row_logits, token, top or 0)
                scores.append(Token(token, "", logprob, best if top is not None else None))
        return scores


def _logprobs(logits: Tensor, token: int, top: int) -> tuple[float, list[tuple[int, float]]]:
    """(log p of ``token``, the ``top`` most likely (id, log p)) from raw logits (V,)."""
    logp = logits.log_softmax(dim=-1)
    values, ids = logp.topk(min(top, logp.numel())) if top else (logp[:0], logp[:0].long())
    return float(logp[token]), list(zip(ids.tolist(), values.tolist(), strict=True))
