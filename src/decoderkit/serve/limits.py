"""What one server accepts and how it batches: every cap a client can hit, in one place.

The CLI's flags fill a ``ServeLimits``; the request schema (``schema.py``), the body-size
guard and the batcher all read their caps from it, so a limit is stated once.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from decoderkit.base.errors import UsageError


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

    def __post_init__(self):
        for name in ("max_body_bytes", "max_inputs", "max_chars", "max_beam", "max_batch",
                     "max_queue"):
            _positive_int(name, getattr(self, name))
        if self.max_len is not None:
            _positive_int("max_len", self.max_len)
        if not isinstance(self.max_explain, int) or self.max_explain < 0:
            raise UsageError(f"max_explain must be an int >= 0, got {self.max_explain!r}")
        if not 0.0 <= self.max_wait_ms <= 60_000.0:  # also refuses NaN
            raise UsageError(f"max_wait_ms must be in [0, 60000], got {self.max_wait_ms!r}")

    def for_model(self, model_max_len: int) -> ServeLimits:
        """These limits with ``max_len`` resolved against the model's position limit."""
        if self.max_len is not None and self.max_len > model_max_len:
            raise UsageError(f"max_len must be <= the model's max_len {model_max_len}, "
                             f"got {self.max_len}")
        return replace(self, max_len=self.max_len or model_max_len)


def _positive_int(name: str, value) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise UsageError(f"{name} must be an int >= 1, got {value!r}")
