"""From a validated completion request to rows, and from rows back to OpenAI's JSON.

Choices are ordered as OpenAI's: prompt p's n completions have indices p n .. p n + n - 1.
Log-probs are the model's own log-softmax (before penalties, bias and temperature), the chosen
token's and the N most likely (``top_logprobs``: those N and the chosen token, by text); with
``echo`` the prompt's tokens come first (the first with none). A stop sequence never reaches
the text; the tokens listed are those wholly before it.
"""

from __future__ import annotations

import time
import uuid

from decoderkit.generation.lm.complete import row_seeds
from decoderkit.generation.lm.defaults import MODE
from decoderkit.generation.settings import REQUEST, Source, settle
from decoderkit.generation.lm.row import Row, Settings, Token
from decoderkit.generation.lm.stops import Decode
from decoderkit.serve.lm.engines import REQUEST_DEFAULTS, ServedLM
from decoderkit.serve.lm.limits import (
    LMLimits,
    check_prompt_lengths,
    check_room,
    check_stream_options,
    check_work,
)


def prompts_of(body, served: ServedLM) -> tuple[list[list[int]], list[str | None]]:
    """(token ids, the text as sent or None) of each prompt, checked against the context."""
    p, one = body.prompt, isinstance(body.prompt, str) or isinstance(body.prompt[0], int)
    if one:
        p = [p]
    ids = [served.encode(x, "prompt" if one else f"prompt[{i}]") if isinstance(x, str)
           else list(x) for i, x in enumerate(p)]
    check_prompt_lengths([len(i) for i in ids], served.config.max_len)
    return ids, [x if isinstance(x, str) else None for x in p]


def rows_of(body, served: ServedLM, limits: LMLimits, prompts: list[list[int]],
            max_tokens: int, logprobs: int | None, echo: bool = False,
            decode: Decode | None = None, eos_ids: frozenset[int] | None = None,
            stop: tuple[str, ...] | None = None, length_field: str = "max_tokens",
            what: str = "prompt {i}", adapter: str | None = None) -> list[Row]:
    """The request's rows, prompt-major (``n`` per prompt), within the context and the work
    limit (``check_room``: ``length_field`` names the length asked, ``what`` the prompt): the
    body's sampling fields, and what the route decides (the length, the log-probs, the
    decode, the end-of-text ids and stop texts; None: the served model's and the body's; the
    LoRA ``adapter`` the rows run with, None: the base)."""
    check_stream_options(body)
    check_room([len(p) for p in prompts], max_tokens, served.config.max_len, length_field, what)
    check_work(limits, [len(p) for p in prompts], body.n, max_tokens)
    if stop is None:
        stop = (body.stop,) if isinstance(body.stop, str) else tuple(body.stop or ())
    bias = tuple((int(k), v) for k, v in (body.logit_bias or {}).items())
    s = sampling(body, served)
    rows, seeds = [], row_seeds(body.seed, body.n)  # choice i: (seed + i) mod 2^32
    for prompt in prompts:
        for seed in seeds:
            settings = Settings(
                max_tokens, greedy=s["greedy"], temperature=s["temperature"],
                top_k=s["top_k"], top_p=s["top_p"], seed=seed,
                presence_penalty=body.presence_penalty,
                frequency_penalty=body.frequency_penalty, logit_bias=bias,
                eos_ids=served.eos_ids if eos_ids is None else eos_ids, stop=stop,
                logprobs=logprobs, prompt_logprobs=echo and logprobs is not None,
                usable_vocab=served.vocab)
            rows.append(Row(prompt, settings, decode or served.tokenizer.decode,
                            adapter=adapter))
    return rows


def sampling(body, served: ServedLM) -> dict[str, object]:
    """greedy, temperature, top_k, top_p of a request: those it sets (``temperature`` 0:
    greedy; ``top_k`` -1: all), else the directory's (``generation.settings.settle``),
    else OpenAI's."""
    given = body.model_fields_set
    greedy = True if "temperature" in given and body.temperature == 0.0 else None
    asked = {"greedy": greedy,
             "temperature": None if greedy or "temperature" not in given else body.temperature,
             "top_k": max(body.top_k, 0) if "top_k" in given else None,
             "top_p": body.top_p if "top_p" in given else None}
    return settle([Source(REQUEST, asked), served.generation.as_source(REQUEST_DEFAULTS)],
                  REQUEST_DEFAULTS, MODE).values


class Choices:
    """The response's choices as they grow: text and log-probs per row (the legacy
    Completions API's JSON; ``serve.lm.chat.ChatChoices`` writes the chat's)."""

    OBJECT, CHUNK, PREFIX = "text_completion", "text_completion", "cmpl"  # the JSON's names

    def __init__(self, body, served: ServedLM, rows: list[Row], texts: list[str | None]):
        self.body, self.served, self.rows = body, served, rows
        self.texts = [texts[i // body.n] for i in range(len(rows))]  # a row's prompt as sent
        self.id = f"{self.PREFIX}-{uuid.uuid4().hex}"
        self.created = int(time.time())
        self.offsets = [0] * len(rows)  # characters of each choice's text so far
        self.chosen: list[list[Token]] = [[] for _ in rows]  # each row's tokens as chosen
        self.model = rows[0].adapter or served.name if rows else served.name  # the id answered

    def prompt_text(self, i: int) -> str:
        """The echoed prompt of row i: as sent, or its ids decoded."""
        text = self.texts[i]
        return self.served.tokenizer.decode(self.rows[i].prompt) if text is None else text

    def logprobs(self, i: int, tokens: list[Token]) -> dict | None:
        """OpenAI's ``logprobs`` object for row i's ``tokens`` (None: not asked)."""
        if self.body.logprobs is None:
            return None
        piece = self.served.tokenizer.decode
        out = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
        for t in tokens:
            text = piece([t.id])
            out["tokens"].append(text)
            out["token_logprobs"].append(t.logprob)
            out["top_logprobs"].append(None if t.top is None else  # the N best and the token
                                       {piece([j]): p for j, p in t.top} | {text: t.logprob})
            out["text_offset"].append(self.offsets[i])
            self.offsets[i] += len(text)
        return out

    def echo(self, i: int) -> tuple[str, dict | None]:
        """Row i's prompt text and log-probs, when ``echo`` is set."""
        scores = self.rows[i].prompt_scores or [Token(t, "") for t in self.rows[i].prompt]
        logprobs = self.logprobs(i, scores)
        if logprobs is not None:
            logprobs["top_logprobs"][0] = None
        return self.prompt_text(i), logprobs

    def final(self, i: int) -> dict:
        """Row i's whole choice (the non-streamed response)."""
        row, text, logprobs = self.rows[i], "", None
        if self.body.echo:
            text, logprobs = self.echo(i)
        more = self.logprobs(i, self.chosen[i][:len(row.output)])
        if more is not None:
            logprobs = more if logprobs is None else \
                {k: logprobs[k] + more[k] for k in logprobs}
        return {"index": i, "text": text + row.text, "logprobs": logprobs,
                "finish_reason": row.finish_reason}

    def record(self, i: int, token: Token) -> None:
        """Keep a chosen token (with its log-probs) for ``final``."""
        self.chosen[i].append(token)

    def chunk(self, i: int, text: str, logprobs: dict | None, finish: str | None) -> dict:
        """One server-sent event's body for row i."""
        return self.event([{"index": i, "text": text, "logprobs": logprobs,
                            "finish_reason": finish}])

    def event(self, choices: list[dict], **more) -> dict:
        """A server-sent event's body holding these ``choices`` (and ``more`` fields)."""
        return {"id": self.id, "object": self.CHUNK, "created": self.created,
                "model": self.model, "choices": choices, **more}

    def opening(self, i: int) -> list[dict]:
        """The events once row i has joined: its echoed prompt, if asked."""
        return [self.chunk(i, *self.echo(i), None)] if self.body.echo else []

    def piece(self, i: int, token: Token) -> dict:
        """The event of row i's next token."""
        return self.chunk(i, token.text, self.logprobs(i, [token]), token.finish_reason)

    def usage_chunk(self) -> dict:
        """The last event, with ``stream_options.include_usage``."""
        return self.event([], usage=self.usage())

    def usage(self) -> dict:
        prompt = sum(len(r.prompt) for r in self.rows[::self.body.n])
        completion = sum(len(r.tokens) for r in self.rows)
        return {"prompt_tokens": prompt, "completion_tokens": completion,
                "total_tokens": prompt + completion}

    def response(self) -> dict:
        """The non-streamed response body."""
        return {"id": self.id, "object": self.OBJECT, "created": self.created,
                "model": self.model,
                "choices": [self.final(i) for i in range(len(self.rows))],
                "usage": self.usage()}
