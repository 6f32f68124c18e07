"""One row of continuous batching: what a sequence being generated is asked for
(``Settings``), the tokens a client sees (``Token``), and its state (``Row``), whatever
engine chooses its tokens (``rows.Rows``, or CTranslate2's ``interop.lm.ctranslate2``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch import Tensor

from decoderkit.base.checks import SEED_MAX
from decoderkit.base.errors import UsageError
from decoderkit.generation.limits import check_int, check_sampling
from decoderkit.generation.lm.prefix import Prefix
from decoderkit.generation.lm.stops import Decode, StopText, check_stops

FINISH_STOP, FINISH_LENGTH = "stop", "length"  # OpenAI's finish_reason values


def check_prompt(prompt: list[int], vocab: int, name: str = "prompt") -> list[int]:
    """``prompt`` as a list of ints, unless it is empty or holds an id outside [0, vocab) (a
    UsageError naming ``name``, the position and the id): the one check of a prompt's ids."""
    if not isinstance(prompt, (list, tuple)) or not prompt:
        raise UsageError(f"{name} must be a non-empty list of token ids, got {prompt!r}")
    for j, t in enumerate(prompt):
        if isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < vocab:
            raise UsageError(f"{name}, position {j}: token id {t!r} is outside the "
                             f"vocabulary [0, {vocab})")
    return list(prompt)


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
    usable_vocab: int | None = None  # ids at or past it (a model's padded rows past its
    # tokenizer's) are never chosen nor listed (``lm_choose.usable_vocab``); None: all

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
        if self.usable_vocab is not None:
            check_int("usable_vocab", self.usable_vocab, 1)
            for token, _ in self.logit_bias:
                check_int("logit_bias token id", token, 0, self.usable_vocab - 1)
        object.__setattr__(self, "stop", check_stops(self.stop))


def asked(s: Settings) -> list[str]:
    """The options of ``generation.engines``' table that ``s`` asks for (a seed, a penalty,
    a bias, log-probabilities)."""
    return [name for name, on in (
        ("seed", s.seed is not None), ("presence_penalty", s.presence_penalty != 0),
        ("frequency_penalty", s.frequency_penalty != 0), ("logit_bias", bool(s.logit_bias)),
        ("logprobs", s.logprobs is not None or s.prompt_logprobs)) if on]


@dataclass
class Token:
    """One chosen token as a client sees it."""

    id: int
    text: str  # the text settled with it ("" while a stop may begin or a character is cut)
    logprob: float | None = None  # the model's own log p of it (before penalties, temperature)
    top: list[tuple[int, float]] | None = None  # the N most likely (id, log p), best first
    finish_reason: str | None = None  # set on the row's last token


@dataclass(eq=False)  # a row is itself: two alike are two rows (Rows.drop finds by identity)
class Row:
    """One sequence being generated: its prompt, settings and state."""

    prompt: list[int]
    settings: Settings
    decode: Decode | None = None  # ids -> text; needed by stop sequences
    adapter: str | None = None  # the LoRA adapter it runs with (``nn.lora.routed``); None:
    # the base model
    prefix: Prefix | None = None  # keys and values of its prompt's first positions (made
    # with its adapter) to start from (``generation.lm.prefix``); None: the store's, if any
    tokens: list[int] = field(default_factory=list)  # chosen so far
    finish_reason: str | None = None  # "stop" or "length" once finished
    prompt_scores: list[Token] = field(default_factory=list)  # with prompt_logprobs
    next_logits: Tensor | None = None  # (1, V): the next token's, set by the engine's forward
    counts: Tensor | None = None  # (1, V): times each token was generated (penalties)
    gens: list[torch.Generator] | None = None  # its sampling generator (None: greedy)
    _text: StopText | None = None

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

    def context(self, length: int) -> list[int]:
        """The ids a model of ``length`` positions reads for the next token: the last
        ``length`` of the prompt and the tokens so far (nanoGPT's crop), in every engine."""
        return (self.prompt + self.tokens)[-length:]

    def count(self, token: int) -> None:
        """One more ``token`` generated, for the presence and frequency penalties."""
        if self.counts is None:
            self.counts = torch.zeros_like(self.next_logits)
        self.counts[0, token] += 1

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
