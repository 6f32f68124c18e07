"""HTTP pieces both servers share: the worker's lifespan, the explorer page and its static
files, the guards in front of the app, a client's hanging up, and pydantic's errors as a
field name and a message.

The translation app (``serve.seq2seq.app``) and the LM app (``serve.lm.app``) each build their
routes and their error bodies; what is the same in both lives here, once.
"""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles

from decoderkit.serve.guards import BearerAuth, BodyLimit, ErrorBody, error_body

STATIC = Path(__file__).parent / "static"


def worker_lifespan(worker):
    """FastAPI's lifespan for a worker thread (``start()``, ``stop()``): started with the
    server; stopped (what is queued finished) after the server has drained its requests."""

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        worker.start()
        try:
            yield
        finally:
            await asyncio.to_thread(worker.stop)

    return lifespan


def add_page_and_guards(app: FastAPI, page: str, max_body_bytes: int, token: str | None,
                        error: ErrorBody = error_body) -> FastAPI:
    """The explorer ``page`` (a file in ``static/``) at /, ``static/`` at /static, the body
    cap and (with ``token``) the bearer token, outermost, so it is checked before anything."""

    @app.get("/", include_in_schema=False)
    def explorer() -> FileResponse:
        return FileResponse(STATIC / page)

    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    app.add_middleware(BodyLimit, max_bytes=max_body_bytes, error=error)
    if token is not None:
        app.add_middleware(BearerAuth, token=token, error=error)
    return app


async def disconnected(request: Request) -> None:
    """Returns when the client hangs up (the body is read: the next message is the end)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


def field_of(loc) -> str:
    """A pydantic error's place as a field name: ("body", "inputs", 0) -> "inputs[0]";
    ("body", "sampling", "top_p") -> "sampling.top_p"; the body as a whole -> "body"."""
    parts = loc[1:] if loc[:1] == ("body",) else loc
    if not parts or isinstance(parts[0], int):  # the body as a whole (or a JSON position)
        return "body"
    name = str(parts[0])
    for p in parts[1:]:
        name += f"[{p}]" if isinstance(p, int) else f".{p}"
    return name


UNREADABLE_BODY = "There was an error parsing the body"  # FastAPI's words for a body it
# could not decode (not UTF-8) as the JSON its Content-Type announced
BODY_NOT_TEXT = ("could not be read as JSON text: send UTF-8 (JSON's encoding) with the "
                 "header 'Content-Type: application/json'")
BODY_NOT_JSON = "was not read as JSON: send it with the header 'Content-Type: application/json'"


def http_message(detail: str) -> str:
    """An ``HTTPException``'s detail as the message to send: FastAPI's own vague ones named."""
    return BODY_NOT_TEXT if detail == UNREADABLE_BODY else detail


def message_of(error: dict) -> str:
    """pydantic's message, with the value sent when it is short enough to echo."""
    msg = error["msg"].removeprefix("Value error, ")
    if error["type"] == "json_invalid":
        return f"not valid JSON ({error.get('ctx', {}).get('error', msg)})"
    if isinstance(error.get("input"), bytes | bytearray) and len(error["loc"]) <= 1:
        return BODY_NOT_JSON  # FastAPI passed the raw body: no JSON Content-Type
    value = error.get("input")
    shown = repr(value)
    return f"{msg}, got {shown}" if len(shown) <= 60 and error["type"] != "missing" else msg
