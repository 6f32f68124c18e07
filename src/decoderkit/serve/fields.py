"""What both servers' request checks share: the error naming a request field (``FieldError``,
a 4xx), a request past the work it may cause (``TooMuchWork``), and the schemas' numbers: JSON
Schema's integer and a ``base.checks.Range`` as a field type. pydantic (the serve extra) is
imported by the field types only: the limits modules, and so ``decoderkit serve``'s flags, are
built without it."""

from __future__ import annotations

from typing import Annotated, Any

from decoderkit.base.checks import Range
from decoderkit.base.errors import UsageError


class FieldError(UsageError):
    """A request this server refuses (422); ``field`` names the request field at fault."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


class TooMuchWork(FieldError):
    """A request within every field's cap whose product passes ``max_tokens`` or
    ``max_explain_values``; ``field`` names the request field to reduce."""


# JSON Schema's integer, in both servers' request schemas
def _integral(value: Any) -> Any:
    """A JSON number without a fraction (4.0) as the int it is; anything else as sent."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def integer(low: int, high: int | None = None):
    """An int in [low, high] (strict otherwise: "4" and true are refused), 4.0 taken as 4."""
    from pydantic import BeforeValidator, Field

    return Annotated[int, Field(ge=low, le=high), BeforeValidator(_integral)]


def ranged(accepted: Range):
    """A number field accepting what ``accepted`` does, its bounds in the JSON Schema; a
    number outside is refused saying ``accepted.span`` (the words the CLI and the library
    use), a value of another type as pydantic's strict types refuse it."""
    from pydantic import BeforeValidator, Field

    def check(value: Any) -> Any:
        value = _integral(value) if accepted.integral else value
        if isinstance(value, (int, float)) and not isinstance(value, bool) \
                and not accepted.accepts(value):
            raise ValueError(f"must be {accepted.span}, got {value!r}")
        return value

    bounds = {("gt" if accepted.low_open else "ge"): accepted.low,
              ("lt" if accepted.high_open else "le"): accepted.high}
    kind = int if accepted.integral else float
    return Annotated[kind, Field(**{k: v for k, v in bounds.items() if v is not None}),
                     BeforeValidator(check)]


def subnormal_gap(low: float) -> dict:
    """JSON Schema's "not in (0, low)": the numbers a model whose smallest normal is ``low``
    reads as 0 (``generation.limits.below_normal`` says why they are refused)."""
    return {"not": {"exclusiveMinimum": 0.0, "exclusiveMaximum": low}}
