"""The bounds of a decoding call: how many tokens it may generate, which tokens it never
generates, and the range checks of its arguments (each refused with a ``UsageError`` that names
the argument, the expected and the actual value).
"""

from __future__ import annotations

import torch
from torch import Tensor

from decoderkit.base.checks import POSITIVE, SEED, Range
from decoderkit.base.errors import UsageError
from decoderkit.nn.model import ModelConfig

LENGTH_FACTOR, LENGTH_SLACK = 2, 16  # default bound: 2 * source tokens + 16
TOP_P = Range(False, 0.0, 1.0, low_open=True)  # nucleus mass, (0, 1]
PerRow = int | list[int] | tuple[int, ...]  # one value for every source row, or one per row


def default_max_len(source_len: int, model_max_len: int) -> int:
    """The most tokens to generate for a source of ``source_len`` tokens when the caller sets
    no bound: 2 * source_len + 16, at most the model's max_len.

    L generated tokens occupy L decoder positions (BOS and the first L - 1 tokens; the last is
    never fed back), so L = max_len fits the positional table; the cache adds its own spare
    position (``DecoderCache``). The one rule of translate, evaluation, training's validation
    and the attention figures.
    """
    return min(model_max_len, LENGTH_FACTOR * source_len + LENGTH_SLACK)


def banned_ids(config: ModelConfig) -> list[int]:
    """Token ids never generated: pad and BOS (as fairseq and Marian), unless one is EOS."""
    return sorted({config.pad_id, config.bos_id} - {config.eos_id})


def restrict(logp: Tensor, t: int, min_len: int, config: ModelConfig) -> Tensor:
    """logp (N, V) with the banned ids, and EOS while fewer than ``min_len`` tokens would have
    been generated (``t`` tokens so far), set to -inf; a new tensor, the others' values kept.

    Not renormalised: a chosen token's value is still the model's own log-probability."""
    logp = logp.clone()
    logp[:, banned_ids(config)] = float("-inf")
    if t + 1 < min_len:
        logp[:, config.eos_id] = float("-inf")
    return logp


def check_int(name: str, value, low: int | None = None, high: int | None = None) -> int:
    """``value`` if it is an int (not a bool) in [low, high]; else a UsageError naming it
    (``base.checks.Range``, the one statement of accepted ranges)."""
    Range(True, low, high).check(name, value)
    return value


def check_number(name: str, value, low: float | None = None, high: float | None = None,
                 *, low_open: bool = False) -> float:
    """``value`` as a float if it is a finite real number in [low, high] ((low, high] with
    ``low_open``); else a UsageError naming it."""
    Range(False, low, high, low_open=low_open).check(name, value)
    return float(value)


def check_seed(value) -> int | None:
    """A generator seed: None (fresh) or an int in ``base.checks.SEED``'s range."""
    if value is not None:
        SEED.check("seed", value)
    return value


def check_sampling(temperature: float, top_k: int, top_p: float) -> None:
    """Refuse a sampling setting out of range, naming it."""
    POSITIVE.check("temperature", temperature)
    check_int("top_k", top_k, 0)
    TOP_P.check("top_p", top_p)


def row_limits(max_len: PerRow, batch: int, config: ModelConfig) -> Tensor:
    """Each source row's token bound as a (B,) long tensor: ``max_len`` one int for every row,
    or a list/tuple of one int per row (each decoded as it would be alone with its bound)."""
    if isinstance(max_len, (list, tuple)):
        if len(max_len) != batch:
            raise UsageError(f"max_len must be an int or one int per source row ({batch}), "
                             f"got {len(max_len)} values")
        limits = list(max_len)
    else:
        limits = [max_len] * batch
    for value in limits:
        check_int("max_len", value, 1, config.max_len)
    return torch.tensor(limits, dtype=torch.long)
