"""What both servers' request checks share: the error naming a request field (``FieldError``,
a 4xx), a request past the work it may cause (``TooMuchWork``), and JSON Schema's integer."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator, Field

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
    return Annotated[int, Field(ge=low, le=high), BeforeValidator(_integral)]
