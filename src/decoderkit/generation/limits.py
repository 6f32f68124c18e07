"""The bounds of a decoding call: how many tokens it may generate, which tokens it never
generates, and the range checks of its arguments (each refused with a ``UsageError`` that names
the argument, the expected and the actual value).

Sampling settings are checked against the dtype the model computes its log-probabilities in:
a temperature or top-p below that dtype's smallest normal number is 0 (or a denormal) in its
arithmetic, and a temperature above its largest number is inf; either turns every probability
into NaN. Before the model is known (``DecodeOptions``) only positivity is checked; the model's
dtype is checked when it is (``sample``, ``translate_lines``, the server's schema).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from decoderkit.base.checks import POSITIVE, SEED, Range
from decoderkit.base.errors import UsageError
from decoderkit.nn.encoder_decoder import ModelConfig

LENGTH_FACTOR, LENGTH_SLACK = 2, 16  # default bound: 2 * source tokens + 16
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


def restrict(logp: Tensor, t: int, min_len: int, config: ModelConfig,
             last: Tensor | None = None) -> Tensor:
    """logp (N, V) with the banned ids, and EOS while fewer than ``min_len`` tokens would have
    been generated (``t`` tokens so far), set to -inf; a new tensor, the others' values kept.
    ``last`` (N,) bool, with ``forced_eos``: the rows at their last allowed token, which get
    EOS with log-prob 0 and nothing else (Hugging Face's ``forced_eos_token_id``).

    Not renormalised: a chosen token's value is still the model's own log-probability (but a
    forced EOS's)."""
    logp = logp.clone()
    logp[:, banned_ids(config)] = float("-inf")
    if t + 1 < min_len:
        logp[:, config.eos_id] = float("-inf")
    if last is not None and bool(last.any()):
        logp[last] = float("-inf")
        logp[last, config.eos_id] = 0.0
    return logp


def last_step(forced_eos: bool, limit: Tensor, t: int, per_source: int = 1) -> Tensor | None:
    """With ``forced_eos``: (N,) whether step ``t`` is each row's last allowed one (``limit``
    (B,) per source, ``per_source`` rows each: beam search's hypotheses); else None."""
    if not forced_eos:
        return None
    return (limit - 1 == t).repeat_interleave(per_source)


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


def logits_dtype(model) -> torch.dtype:
    """The float dtype a model's log-probabilities come in: its first floating-point
    parameter's; float32 for a model run by another runtime (no such parameters)."""
    params = model.parameters() if isinstance(model, torch.nn.Module) else ()
    return next((p.dtype for p in params if p.is_floating_point()), torch.float32)


def temperature_range(dtype: torch.dtype | None = None) -> Range:
    """Temperatures a ``dtype`` model can divide by: [smallest normal, largest finite];
    None (no model yet): any finite number > 0."""
    if dtype is None:
        return POSITIVE
    info = torch.finfo(dtype)
    return Range(False, info.tiny, info.max)


def top_p_range(dtype: torch.dtype | None = None) -> Range:
    """Nucleus masses a ``dtype`` model can compare with: [smallest normal, 1]; None (no
    model yet): (0, 1]."""
    if dtype is None:
        return Range(False, 0.0, 1.0, low_open=True)
    return Range(False, torch.finfo(dtype).tiny, 1.0)


def _check_in_dtype(name: str, value, accepted: Range, dtype: torch.dtype | None,
                    why: str = "outside, it is 0 or inf in {dt}") -> float:
    if dtype is None:
        accepted.check(name, value)
    elif not accepted.accepts(value):
        dt = str(dtype).removeprefix("torch.")
        raise UsageError(f"{name} must be {accepted.span} for a {dt} model "
                         f"({why.format(dt=dt)}), got {value!r}")
    return float(value)


def check_temperature(value, dtype: torch.dtype | None = None,
                      name: str = "temperature") -> float:
    """``value`` as a float if a ``dtype`` model can sample at that temperature."""
    return _check_in_dtype(name, value, temperature_range(dtype), dtype)


def check_top_p(value, dtype: torch.dtype | None = None, name: str = "top_p") -> float:
    """``value`` as a float if it is a nucleus mass a ``dtype`` model can compare with."""
    return _check_in_dtype(name, value, top_p_range(dtype), dtype)


def check_length_penalty(value, max_len: int, dtype: torch.dtype) -> float:
    """``value`` as a float if beam search can rank hypotheses of up to ``max_len`` tokens by
    log p / length ** value in ``dtype``: at most log(largest finite) / log(max_len), beyond
    which length ** value is inf and every score 0 (a tie)."""
    high = math.log(torch.finfo(dtype).max) / math.log(max(max_len, 2))
    return _check_in_dtype("length_penalty", value, Range(False, 0.0, high), dtype,
                           f"beyond, {max_len} ** length_penalty is inf in {{dt}}")


def check_seed(value, name: str = "seed") -> int | None:
    """A generator seed: None (fresh) or an int in ``base.checks.SEED``'s range."""
    if value is not None:
        SEED.check(name, value)
    return value


def check_sampling(temperature: float, top_k: int, top_p: float,
                   dtype: torch.dtype | None = None) -> None:
    """Refuse a sampling setting out of range for a ``dtype`` model (None: not known yet,
    checked again when it is), naming it."""
    check_temperature(temperature, dtype)
    check_int("top_k", top_k, 0)
    check_top_p(top_p, dtype)


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
