"""A chat kept turn by turn, the way ``decoderkit lm chat`` talks: each user message is added
to the history, the whole conversation rendered by the model's chat template (``chat``: the
ids transformers' ``apply_chat_template`` gives), and the reply generated on the server's
engine (``generation.lm.rows``: one ``Row`` stepped by ``Rows``), its text shown as it settles
(no special tokens, never part of a stop), ending at the model's end-of-text ids, the
template's ``eos_token`` or a stop; only the tokenizer's ids are chosen (``usable_vocab``: no
padded row's). The reply joins the history, so the next turn sees it.

Interrupted, the reply ends there: the text shown so far is kept as the assistant's message
and the conversation goes on. ``say``'s ``stopped`` is asked before the first step and after
each (``lm chat``: a flag its SIGINT handler sets, so that no code on the way, a prefill, the
template's render or a finalizer run meanwhile, can swallow or misplace a Ctrl-C); a
``KeyboardInterrupt`` raised in the prefill or a step (a caller with Python's own handler, a
notebook) ends it alike.

Each turn starts from the keys and values of the conversation so far (``prefix_cache_mb``:
a ``generation.lm.prefix.PrefixStore`` of that many MiB, kept between turns; None: off): the
new rendered prompt's longest prefix already prefilled, compared id by id (a template may
render earlier turns differently once a later one exists), so a turn prefills the last reply
and the new message, not the whole conversation; its reply is the one prefilling it whole
gives, bit for bit (rowwise copy, int8). The reply's own keys and values, made by steps,
round differently from a prefill's: they are prefilled with the next message. One ``Rows``
serves every turn: its cache is allocated once and its pages stay resident (a fresh one each
turn page-faulted the conversation's keys and values in again as the prefix was loaded).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from torch import nn

from decoderkit.generation.lm.choose import usable_vocab
from decoderkit.generation.lm.prefix import (DEFAULT_PREFIX_CACHE_MB, PrefixStore,
                                             check_prefix_cache_mb)
from decoderkit.generation.lm.row import Row, Settings
from decoderkit.generation.lm.rows import Rows
from decoderkit.text.lm.chat import ChatTemplate, special_stops
from decoderkit.text.lm.tokenizer import LMTokenizer

INTERRUPTED = "interrupted"  # a reply's end when Ctrl-C stopped it


@dataclass
class Reply:
    """One assistant turn: its text and why it ended ("stop", "length" or "interrupted")."""

    text: str
    finish_reason: str
    ids: list[int] = field(default_factory=list)  # the tokens chosen (an end-of-text's too)


class Conversation:
    """The history of one chat with ``model`` (the copy to run: ``for_inference``'s)."""

    def __init__(self, model: nn.Module, tokenizer: LMTokenizer, template: ChatTemplate,
                 settings: Settings, system: str | None = None,
                 prefix_cache_mb: int | None = DEFAULT_PREFIX_CACHE_MB):
        stop, stop_ids = special_stops(tokenizer, settings.stop)
        end = settings.eos_ids | template.end_ids(tokenizer) | stop_ids
        self.model, self.tokenizer, self.template = model, tokenizer, template
        self.settings = replace(settings, eos_ids=end, stop=stop, usable_vocab=usable_vocab(
            model.config.vocab_size, tokenizer.vocab_size))  # no padded row's id
        self.messages: list[dict] = [] if system is None else [
            {"role": "system", "content": system}]
        self.prefixes = None if prefix_cache_mb is None else \
            PrefixStore(check_prefix_cache_mb(prefix_cache_mb) << 20)
        self.rows = Rows(model, self.prefixes)  # every turn's: its cache's pages stay resident
        self.prefilled = 0  # prompt positions prefilled over the turns (the rest: reused)

    def say(self, text: str, show: Callable[[str], object] = lambda piece: None,
            stopped: Callable[[], bool] = lambda: False) -> Reply:
        """Add the user's ``text``, answer it (``show`` gets each piece as it settles) and
        keep the answer; once ``stopped()`` is true the reply ends, "interrupted". The
        template's refusal (``TemplateFailed``) leaves the history as it was."""
        asked = self.messages + [{"role": "user", "content": text}]
        prompt = self.template.encode(self.tokenizer, asked)
        row = Row(prompt, self.settings, lambda ids: self.tokenizer.decode(ids, skip_special=True))
        rows, shown = self.rows, []

        def emit(events) -> None:
            for _, token in events:
                shown.append(token.text)
                show(token.text)

        try:
            rows.join(row)
            while row.finish_reason is None and not stopped():
                rows.step(emit)
            reason = row.finish_reason or INTERRUPTED
        except KeyboardInterrupt:
            reason = INTERRUPTED
        rows.drop(row)  # an interrupted row's slot free for the next turn (else a no-op)
        self.prefilled = rows.prefilled
        reply = Reply("".join(shown), reason, list(row.tokens))
        self.messages = asked + [{"role": "assistant", "content": reply.text}]
        return reply
