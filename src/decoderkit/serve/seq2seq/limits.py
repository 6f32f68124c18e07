"""What one translation server accepts and how it batches: every cap a client can hit, in one
place (the ranges a request's numbers take on any server, temperature and length_penalty, are
``base.checks``' as everywhere; the LM server's caps: ``serve.lm.limits``).

``decoderkit serve``'s flags are built from ``ServeLimits`` (``--max-x`` sets ``max_x``, with
its default and ``SERVE_RANGES``' range); the request schema (``schema.py``), the body-size
guard and the batcher all read their caps from it, so a limit is stated once. Each field is
capped alone by the schema; ``request_cost`` bounds what they multiply to: the tokens one
request makes the decoder compute and the numbers its ``explain`` trace returns.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from decoderkit.base.checks import (
    BATCH,
    BODY_BYTES,
    MODEL_SIZES,
    QUEUE,
    WAIT_MS,
    WORK,
    check_fields,
    count,
    size,
)
from decoderkit.base.errors import UsageError
from decoderkit.serve.fields import TooMuchWork
from decoderkit.generation.seq2seq.bounds import default_max_len
from decoderkit.generation.seq2seq.translate import DecodeOptions
from decoderkit.nn.seq2seq.model import ModelConfig


# Each field's accepted values (its flag's too); a field the LM server has too takes the same
SERVE_RANGES = {"max_body_bytes": BODY_BYTES, "max_inputs": size(), "max_chars": size(),
                "max_len": MODEL_SIZES["max_len"], "max_beam": count(1, 64),
                "max_explain": count(0, 100), "max_batch": BATCH, "max_wait_ms": WAIT_MS,
                "max_queue": QUEUE, "max_work_tokens": WORK, "max_explain_values": size()}


@dataclass(frozen=True)
class ServeLimits:
    """Request caps and dynamic-batching settings of one server."""

    max_body_bytes: int = 65_536  # request body size; larger bodies get 413
    max_inputs: int = 32  # texts per request
    max_chars: int = 512  # characters per input text
    max_len: int | None = None  # most generated tokens a request may ask (None: model's max_len)
    max_beam: int = 8  # largest beam size (and n_best)
    max_explain: int = 10  # most alternatives per step a request may ask with ``explain``
    max_batch: int = 32  # most sentences decoded together (1: batching off)
    max_wait_ms: float = 5.0  # how long a request waits for others to join its batch
    max_queue: int = 1024  # sentences waiting to be decoded; beyond, requests get 503
    max_work_tokens: int = 32_768  # tokens one request may make the decoder compute
    # (request_cost)
    max_explain_values: int = 1_000_000  # numbers one request's explain trace may hold

    def __post_init__(self):
        check_fields(self, SERVE_RANGES, optional=("max_len",))

    def for_model(self, model_max_len: int) -> ServeLimits:
        """These limits with ``max_len`` resolved against the model's position limit."""
        if self.max_len is not None and self.max_len > model_max_len:
            raise UsageError(f"max_len must be <= the model's max_len {model_max_len}, "
                             f"got {self.max_len}")
        return replace(self, max_len=self.max_len or model_max_len)


def request_cost(config: ModelConfig, source_lengths: list[int],
                 options: DecodeOptions) -> tuple[int, int]:
    """(tokens, explain values) at most of decoding sources of these token counts.

    tokens = sum over inputs of beam x T, T the input's length bound (the request's max_len,
    else ``default_max_len`` of its source); explain values = sum over inputs of
    T (k + 1) + layers x heads x (T (T + 1) / 2 + T S): per step the token, its k alternatives
    and every layer's and head's self-attention over the prefix and cross-attention over the
    S source tokens. Empty inputs and inputs too long for the model decode nothing.
    """
    tokens = values = 0
    per_position = config.n_layers * config.n_heads
    for S in source_lengths:
        if S == 0 or S > config.max_len:
            continue
        T = options.max_len or default_max_len(S, config.max_len)
        tokens += options.beam * T
        if options.explain:
            values += T * (options.explain + 1) + per_position * (T * (T + 1) // 2 + T * S)
    return tokens, values


def check_cost(limits: ServeLimits, config: ModelConfig, source_lengths: list[int],
               options: DecodeOptions) -> None:
    """Raise ``TooMuchWork`` naming the limit when a request would pass ``max_work_tokens`` or
    ``max_explain_values``."""
    tokens, values = request_cost(config, source_lengths, options)
    if tokens > limits.max_work_tokens:
        raise TooMuchWork("inputs", f"the request may decode {tokens} tokens (inputs x beam x "
                          f"max_len of each), more than this server's max_work_tokens "
                          f"{limits.max_work_tokens} (--max-work-tokens): send fewer inputs, "
                          f"a smaller beam or max_len")
    if values > limits.max_explain_values:
        raise TooMuchWork("explain", f"the request's explain trace may hold {values} numbers "
                          f"(inputs x steps x (alternatives + layers {config.n_layers} x heads "
                          f"{config.n_heads} x (prefix + source))), more than this server's "
                          f"max_explain_values {limits.max_explain_values} "
                          f"(--max-explain-values): explain fewer inputs or set a smaller max_len")

