"""What one LM server accepts: every cap a client can hit, in one place.

The CLI's flags fill an ``LMLimits``; the request schema (``schema.py``) caps each field from
it, ``check_work`` bounds what the fields multiply to, and the worker reads its batch and
queue sizes from it.
"""

from __future__ import annotations

from dataclasses import dataclass

from decoderkit.base.checks import BODY_BYTES, count
from decoderkit.serve.fields import FieldError, TooMuchWork

MAX_LOGPROBS = 5  # OpenAI's cap on ``logprobs``
MAX_STOPS = 4  # OpenAI's cap on ``stop`` sequences


@dataclass(frozen=True)
class LMLimits:
    """Request caps and continuous-batching sizes of one LM server."""

    max_body_bytes: int = 65_536  # request body size; larger bodies get 413
    max_prompts: int = 32  # prompts per request
    max_n: int = 16  # completions per prompt (``n``)
    max_tokens: int | None = None  # cap on a request's max_tokens (None: the context length)
    max_work: int = 65_536  # tokens one request may make the model hold: rows x (prompt + new)
    max_running: int = 32  # rows (prompt x n) stepped together
    max_queue: int = 256  # rows waiting to join; beyond, requests get 429

    def __post_init__(self):
        BODY_BYTES.check("max_body_bytes", self.max_body_bytes)
        for name in ("max_prompts", "max_n", "max_work", "max_running", "max_queue"):
            count(1).check(name, getattr(self, name))
        if self.max_tokens is not None:
            count(1).check("max_tokens", self.max_tokens)

    def token_cap(self, context: int) -> int:
        """The most tokens a request may ask: ``max_tokens``, else the context length."""
        return self.max_tokens or context


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


def check_work(limits: LMLimits, lengths: list[int], n: int, max_tokens: int) -> int:
    """The rows' tokens, sum over prompts of n x (prompt + max_tokens), unless it passes
    ``max_work`` (then ``TooMuchWork`` naming the fields to reduce)."""
    work = sum(n * (length + max_tokens) for length in lengths)
    if work > limits.max_work:
        raise TooMuchWork("max_tokens", f"the request may hold {work} tokens (prompts x n x "
                          f"(prompt + max_tokens)), more than this server's max_work "
                          f"{limits.max_work} (--max-tokens): send fewer or shorter prompts, "
                          f"a smaller n or max_tokens")
    return work
