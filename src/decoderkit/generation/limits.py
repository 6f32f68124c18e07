"""The range checks of a generation call's arguments, for both families (each refused with a
``UsageError`` that names the argument, the expected and the actual value); the
encoder-decoder's length and token bounds: ``generation.seq2seq.bounds``.

Sampling settings are checked against the dtype the model computes its log-probabilities in:
a temperature or top-p below that dtype's smallest normal number is 0 (or a denormal) in its
arithmetic; either turns every probability into NaN. Before the model is known
(``DecodeOptions``) the dtype-free range (``base.checks.TEMPERATURE``) is checked; the model's
dtype when it is (``sample``, ``translate_lines``, the server's schema).
"""

from __future__ import annotations


import torch

from decoderkit.base.checks import SEED, TEMPERATURE, Range, written
from decoderkit.base.errors import UsageError
from decoderkit.base.moved import forward

PerRow = int | list[int] | tuple[int, ...]  # one value for every source row, or one per row


def check_int(name: str, value, low: int | None = None, high: int | None = None) -> int:
    """``value`` if it is an int (not a bool) in [low, high]; else a UsageError naming it
    (``base.checks.Range``, the one statement of accepted ranges)."""
    Range(True, low, high).check(name, value)
    return value


def logits_dtype(model) -> torch.dtype:
    """The float dtype a model's log-probabilities come in: its first floating-point
    parameter's (float32 for bfloat16 and float16, whose logits are widened:
    ``DecoderOnlyLM.logits``); float32 for a model run by another runtime (no parameters)."""
    params = model.parameters() if isinstance(model, torch.nn.Module) else ()
    dtype = next((p.dtype for p in params if p.is_floating_point()), torch.float32)
    return torch.float32 if dtype in (torch.bfloat16, torch.float16) else dtype


def temperature_range(dtype: torch.dtype | None = None) -> Range:
    """Temperatures a ``dtype`` model samples at: ``base.checks.TEMPERATURE`` from its
    smallest normal number on (below, it divides by 0); None (no model yet): TEMPERATURE."""
    if dtype is None:
        return TEMPERATURE
    return Range(False, torch.finfo(dtype).tiny, min(TEMPERATURE.high, torch.finfo(dtype).max))


def top_p_range(dtype: torch.dtype | None = None) -> Range:
    """Nucleus masses a ``dtype`` model can compare with: [smallest normal, 1]; None (no
    model yet): (0, 1]."""
    if dtype is None:
        return Range(False, 0.0, 1.0, low_open=True)
    return Range(False, torch.finfo(dtype).tiny, 1.0)


def below_normal(value: object, low: float, dtype: torch.dtype) -> str | None:
    """Why a number ``value`` in (0, low), below a ``dtype`` model's smallest normal ``low``,
    is refused, in the words every schema uses (the bound as a person writes it); None for
    any other value (0 and below: the field's own bound says it)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < low:
        return None
    dt = str(dtype).removeprefix("torch.")
    return f"must be at least {written(low, 1)}, the smallest normal {dt} (smaller is 0 there)"


def check_in_dtype(name: str, value, accepted: Range, dtype: torch.dtype | None,
                    why: str = "below, it is 0 in {dt}") -> float:
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
    return check_in_dtype(name, value, temperature_range(dtype), dtype)


def check_top_p(value, dtype: torch.dtype | None = None, name: str = "top_p") -> float:
    """``value`` as a float if it is a nucleus mass a ``dtype`` model can compare with."""
    return check_in_dtype(name, value, top_p_range(dtype), dtype)


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


__getattr__ = forward(__name__)  # the bounds that moved to generation.seq2seq.bounds
