"""POST /v1/chat/completions: OpenAI's Chat Completions API on the completions' rows.

The conversation is rendered by the model's chat template (``text.lm.chat``: as
transformers renders it, sandboxed and bounded, in a thread off the event loop) into one
prompt, whose ``n`` rows are made, queued and answered as a completion's
(``completions.rows_of``, ``answer.answer``). What differs is chat's: the reply's text is
decoded without special tokens, a reply ends at the model's end-of-text ids and the template's
``eos_token`` (and at a ``stop`` that is a special token's text, as its id), the default
length is what the context leaves after the prompt, and the JSON is chat's (``message``;
streamed ``delta`` chunks, the role first; log-probs as ``content`` entries). (No ``from
__future__ import annotations``: FastAPI reads the route's body class at run time.)
"""

import asyncio

from fastapi import FastAPI, Request

from decoderkit.base.errors import UsageError
from decoderkit.generation.lm.row import Token
from decoderkit.serve.fields import FieldError
from decoderkit.serve.lm.answer import answer, check_model
from decoderkit.serve.lm.completions import Choices, rows_of
from decoderkit.serve.lm.engines import ServedLM
from decoderkit.serve.lm.limits import LMLimits, check_prompt_lengths
from decoderkit.serve.lm.schema import chat_model
from decoderkit.serve.lm.worker import Worker
from decoderkit.text.lm.chat import special_stops


def add_chat_route(app: FastAPI, served: ServedLM, worker: Worker, limits: LMLimits,
                   asks: dict) -> None:
    """POST /v1/chat/completions on ``app`` (``asks``: its error responses)."""
    context = served.config.max_len
    ChatRequest = chat_model(limits, context, served.vocab)

    @app.post("/v1/chat/completions", responses=asks)
    async def chat_completions(body: ChatRequest, request: Request):
        """Answer the conversation ``n`` times; ``stream`` sends the tokens as they come."""
        adapter = check_model(served, body.model)
        if served.chat is None:
            raise UsageError(served.no_chat)
        served.check(body)
        if body.top_logprobs is not None and not body.logprobs:
            raise FieldError("top_logprobs", "needs logprobs: true")
        messages = [m.model_dump(exclude_none=True) for m in body.messages]
        prompt = await asyncio.to_thread(served.chat.encode, served.tokenizer, messages)
        check_prompt_lengths([len(prompt)], context, "messages", "the rendered conversation")
        stop, stop_ids = special_stops(served.tokenizer, _stops(body.stop))
        asked, field = new_tokens(body, limits, context, len(prompt))
        rows = rows_of(body, served, limits, [prompt], asked,
                       (body.top_logprobs or 0) if body.logprobs else None,
                       decode=_reply_text(served), stop=stop,
                       eos_ids=served.eos_ids | served.chat.end_ids(served.tokenizer) | stop_ids,
                       length_field=field, what="the rendered conversation", adapter=adapter)
        return await answer(worker, rows, ChatChoices(body, served, rows, [None]), request)


def new_tokens(body, limits: LMLimits, context: int, prompt: int) -> tuple[int, str]:
    """(the reply's most tokens, the field that asked them): ``max_completion_tokens`` or
    ``max_tokens`` (one, or both alike), else what the context leaves after the ``prompt``
    tokens within the server's cap (none left: a 400 naming ``messages``)."""
    a, b = body.max_completion_tokens, body.max_tokens
    if a is not None and b is not None and a != b:
        raise FieldError("max_completion_tokens", f"is {a} but max_tokens is {b}: give one")
    if a is not None or b is not None:
        return (a, "max_completion_tokens") if a is not None else (b, "max_tokens")
    if prompt >= context:
        raise FieldError("messages", f"the rendered conversation has {prompt} tokens, the "
                         f"model's whole context of {context}: no room for a reply")
    return min(limits.token_cap(context), context - prompt), "max_tokens"


def _stops(stop) -> tuple[str, ...]:
    return (stop,) if isinstance(stop, str) else tuple(stop or ())


def _reply_text(served: ServedLM):
    """A reply's ids to its text: without special tokens."""
    return lambda ids: served.tokenizer.decode(ids, skip_special=True)


class ChatChoices(Choices):
    """The chat response's choices as they grow (OpenAI's chat JSON)."""

    OBJECT, CHUNK, PREFIX = "chat.completion", "chat.completion.chunk", "chatcmpl"

    def logprobs(self, i: int, tokens: list[Token]) -> dict | None:
        """Chat's ``logprobs``: a ``content`` entry per token (its text, log p, UTF-8 bytes
        and the ``top_logprobs`` most likely), None when not asked."""
        if not self.body.logprobs:
            return None
        piece = self.served.tokenizer.decode

        def entry(token: int, logprob: float) -> dict:
            text = piece([token])
            return {"token": text, "logprob": logprob, "bytes": list(text.encode())}

        return {"content": [entry(t.id, t.logprob) | {
            "top_logprobs": [entry(j, p) for j, p in (t.top or [])]} for t in tokens]}

    def final(self, i: int) -> dict:
        """Row i's whole choice: the assistant's message."""
        row = self.rows[i]
        return {"index": i, "message": {"role": "assistant", "content": row.text},
                "logprobs": self.logprobs(i, self.chosen[i][:len(row.output)]),
                "finish_reason": row.finish_reason}

    def delta(self, i: int, delta: dict, logprobs: dict | None, finish: str | None) -> dict:
        """One chunk of row i's message."""
        return self.event([{"index": i, "delta": delta, "logprobs": logprobs,
                            "finish_reason": finish}])

    def opening(self, i: int) -> list[dict]:
        """A row's first chunk: the role."""
        return [self.delta(i, {"role": "assistant", "content": ""}, None, None)]

    def piece(self, i: int, token: Token) -> dict:
        logprobs = None if token.id < 0 or token.id in self.rows[i].settings.eos_ids \
            else self.logprobs(i, [token])
        return self.delta(i, {"content": token.text}, logprobs, token.finish_reason)
