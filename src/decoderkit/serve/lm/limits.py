"""What one LM server accepts: every cap a client can hit, in one place (the fixed ones, as
OpenAI's, beside the operator's ``LMLimits``; the translation server's: ``serve.seq2seq.limits``).

``decoderkit serve``'s flags are built from ``LMLimits`` (``--max-x`` sets ``max_x``, with its
default and ``LM_RANGES``' range: the same flag of the translation server takes the same range);
the request schema (``schema.py``) caps each field from it, ``check_work`` bounds what the
fields multiply to, and the worker reads its batch and queue sizes from it.
"""

from __future__ import annotations

from dataclasses import dataclass

from decoderkit.base.checks import (
    BATCH,
    BODY_BYTES,
    MODEL_SIZES,
    QUEUE,
    WORK,
    check_fields,
    count,
    size,
)
from decoderkit.serve.fields import FieldError, TooMuchWork

MAX_LOGPROBS = 5  # OpenAI's cap on ``logprobs``
MAX_STOPS = 4  # OpenAI's cap on ``stop`` sequences
MAX_STOP_CHARS = 256  # characters of one stop sequence (and of ``user``, a speaker's name)
MAX_MESSAGES = 4096  # messages in a chat, parts in a message (the body limit is the real bound)
MAX_BIASES = 300  # logit_bias entries (OpenAI's cap)
OPENAI_TEMPERATURE = 2.0  # OpenAI's largest temperature (within base.checks.TEMPERATURE)
OPENAI_PENALTY = 2.0  # OpenAI's bound on presence_penalty and frequency_penalty (either sign)
OPENAI_BIAS = 100.0  # OpenAI's bound on a logit_bias value (either sign)
MAX_PROMPT_CHARS = 1 << 20  # a text prompt's characters (the body limit is the real bound)
MAX_DETOKENIZE = 1 << 16  # token ids one /detokenize request may send
MAX_EXPLORE_TOKENS = 64  # the explorer's tokens: attention is N h T^2 numbers
BODY_BYTES_PER_TOKEN = 16  # the default body cap's bytes per token of context per prompt: a
# token id in JSON is at most 7 digits and a separator, a token of text a few characters (a
# non-ASCII one escaped as \uXXXX: 6 bytes each), a message's keys a few dozen bytes
MIN_BODY_BYTES = 65_536  # the default body cap of a model of a short context

# Each field's accepted values (its flag's too); a field the translation server has too takes
# the same
LM_RANGES = {"max_body_bytes": BODY_BYTES, "max_inputs": size(), "max_n": count(1, 128),
             "max_len": MODEL_SIZES["max_len"], "max_work_tokens": WORK, "max_batch": BATCH,
             "max_queue": QUEUE}


@dataclass(frozen=True)
class LMLimits:
    """Request caps and continuous-batching sizes of one LM server."""

    max_body_bytes: int | None = None  # request body size; larger bodies get 413 (None:
    # sized from the model's context, ``body_cap``)
    max_inputs: int = 32  # prompts per request
    max_n: int = 16  # completions per prompt (``n``)
    max_len: int | None = None  # cap on a request's new tokens, its ``max_tokens`` field (None:
    # the context length)
    max_work_tokens: int = 65_536  # the work budget: tokens one request may make the model
    # hold, rows x (prompt + new) (not OpenAI's max_tokens, a request's new tokens)
    max_batch: int = 32  # rows (prompt x n) stepped together
    max_queue: int = 256  # rows waiting to join; beyond, requests get 429

    def __post_init__(self):
        check_fields(self, LM_RANGES, optional=("max_len", "max_body_bytes"))

    def token_cap(self, context: int) -> int:
        """The most new tokens a request may ask: ``max_len``, else the context length."""
        return self.max_len or context

    def body_cap(self, context: int) -> int:
        """The request body's most bytes: ``max_body_bytes``, else room for ``max_inputs``
        prompts of a whole ``context`` each (``BODY_BYTES_PER_TOKEN`` a token, at least
        ``MIN_BODY_BYTES``, at most what ``--max-body-bytes`` accepts): a long conversation
        is a legitimate request."""
        if self.max_body_bytes is not None:
            return self.max_body_bytes
        wanted = BODY_BYTES_PER_TOKEN * context * self.max_inputs
        return min(max(MIN_BODY_BYTES, wanted), BODY_BYTES.high)


def check_prompt_lengths(lengths: list[int], context: int, field: str = "prompt",
                         what: str = "prompt {i}") -> None:
    """A 400 naming ``field`` and the prompt (``what``, of its index i) that is empty or
    longer than the model's context."""
    for i, n in enumerate(lengths):
        name = what.format(i=i)
        if n == 0:
            raise FieldError(field, f"{name} is empty: give at least one token")
        if n > context:
            raise FieldError(field, f"{name} has {n} tokens, more than the model's context "
                             f"length {context}")


def check_room(lengths: list[int], max_tokens: int, context: int,
               field: str = "max_tokens", what: str = "prompt {i}") -> None:
    """The one rule of both routes (OpenAI's and vLLM's): each prompt and the new tokens
    asked (``field``) fit in the model's context, else a 400 naming the field, the prompt
    (``what``, of its index i) and the context; nothing is generated past it."""
    for i, n in enumerate(lengths):
        if n + max_tokens > context:
            raise FieldError(field, f"{what.format(i=i)} has {n} tokens and {field} asks "
                             f"{max_tokens} more: {n + max_tokens}, past the model's context "
                             f"of {context} tokens (at most {max(context - n, 0)} fit)")


def check_stream_options(body) -> None:
    """``stream_options`` only with ``stream: true`` (a 400 otherwise, as OpenAI and vLLM
    answer)."""
    if body.stream_options is not None and not body.stream:
        raise FieldError("stream_options", "is only allowed with stream: true")


def check_work(limits: LMLimits, lengths: list[int], n: int, max_tokens: int) -> int:
    """The rows' tokens, sum over prompts of n x (prompt + max_tokens), unless it passes
    the server's ``max_work_tokens`` (then ``TooMuchWork`` naming the fields to reduce)."""
    work = sum(n * (length + max_tokens) for length in lengths)
    if work > limits.max_work_tokens:
        raise TooMuchWork("max_tokens", f"the request may hold {work} tokens (prompts x n x "
                          f"(prompt + max_tokens)), more than this server's "
                          f"--max-work-tokens "
                          f"{limits.max_work_tokens}: send fewer or shorter prompts, "
                          f"a smaller n or max_tokens")
    return work
