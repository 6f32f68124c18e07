"""ASGI guards in front of the app: the request body size cap and the bearer token.

Both answer in the API's error shape (``error_body``, or the app's own ``ErrorBody``: the LM
server's is OpenAI's): JSON naming the field at fault.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable

from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse

from decoderkit.base.errors import UsageError

PUBLIC_PATHS = ("/health", "/", "/docs", "/openapi.json")  # and everything under /static/
ErrorBody = Callable[[str, str], dict]  # (field, message) -> the JSON body of an error


def error_body(field: str, message: str, errors: list[dict] | None = None) -> dict:
    """The one error shape: ``{"error": "field: message", "field": ..., "errors": [...]}``."""
    errors = errors or [{"field": field, "message": message}]
    return {"error": f"{field}: {message}", "field": field, "errors": errors}


class BodyLimit:
    """Refuse a body over ``max_bytes`` with 413: at once when Content-Length says so, else
    as soon as the streamed (chunked) body passes it."""

    def __init__(self, app, max_bytes: int, error: ErrorBody = error_body):
        self.app, self.max_bytes, self.error = app, max_bytes, error

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = Headers(scope=scope).get("content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_bytes):
            return await self._refuse(declared, scope, receive, send)
        seen = 0

        async def counted():
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.max_bytes:  # FastAPI passes an HTTPException from here through
                raise HTTPException(413, f"more than {self.max_bytes} bytes (this server's "
                                    "--max-body-bytes)")
            return message

        await self.app(scope, counted, send)

    async def _refuse(self, declared: str, scope, receive, send):
        said = (f"is {declared} bytes, more than this server's --max-body-bytes "
                f"{self.max_bytes}" if declared.isdigit() else
                f"Content-Length must be an integer <= {self.max_bytes} (--max-body-bytes), "
                f"got {declared[:40]!r}")
        body = self.error("body", said)
        await JSONResponse(body, status_code=413, headers={"Connection": "close"})(
            scope, receive, send)


def check_token(token: str, name: str = "token") -> None:
    """A token must be 1+ visible ASCII characters (no space): the only ones an HTTP header
    carries as written (and ``Bearer <token>`` splits at a space). The message gives the
    position and code point at fault, never the secret itself."""
    if not isinstance(token, str) or not token:
        raise UsageError(f"{name} must be a non-empty string")
    for i, char in enumerate(token):
        if not "!" <= char <= "~":
            raise UsageError(f"{name} must be visible ASCII characters without spaces (an HTTP "
                             f"header carries no others), got U+{ord(char):04X} at position "
                             f"{i + 1}")


class BearerAuth:
    """With a token set, every path but ``PUBLIC_PATHS`` and /static/ needs
    ``Authorization: Bearer <token>`` (else 401)."""

    def __init__(self, app, token: str, error: ErrorBody = error_body):
        self.app, self.token, self.error = app, token.encode(), error

    async def __call__(self, scope, receive, send):
        path = scope.get("path", "")
        if scope["type"] != "http" or path in PUBLIC_PATHS or path.startswith("/static/"):
            return await self.app(scope, receive, send)
        given = Headers(scope=scope).get("authorization", "")
        scheme, _, credentials = given.partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(credentials.strip().encode(),
                                                              self.token):
            return await self.app(scope, receive, send)
        body = self.error("authorization", "expected 'Bearer <token>' with this server's token")
        await JSONResponse(body, status_code=401, headers={"WWW-Authenticate": "Bearer"})(
            scope, receive, send)
