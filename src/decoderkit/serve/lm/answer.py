"""How an LM request is answered once its rows are made: queued on the worker (429 when the
queue is full), then the whole response once the rows finish, or server-sent events as they
go; every error in OpenAI's body ``{"error": {"message", "type", "param", "code"}}``, in a
stream too. The completion and chat routes share it (their ``Choices`` shape the JSON).
"""

import asyncio
import json

from fastapi import Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException

from decoderkit.base.errors import UsageError
from decoderkit.generation.lm.row import Row
from decoderkit.serve.http import disconnected
from decoderkit.serve.lm.completions import Choices
from decoderkit.serve.lm.engines import ServedLM
from decoderkit.serve.lm.worker import DONE, Job, Worker
from decoderkit.serve.worker import Overloaded, StepFailed, WorkerDied

TYPES = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
         405: "invalid_request_error", 413: "invalid_request_error", 429: "rate_limit_error",
         500: "server_error", 503: "server_error"}

STREAMED = {200: {"description": "the completion; with stream, server-sent events (data: "
                  "{chunk}, ..., data: [DONE])",
                  "content": {"text/event-stream": {"schema": {  # each event (OpenAPI 3.1)
                      "type": "object", "required": ["data"],
                      "properties": {"data": {"type": "string"}}}}}}}


def openai_error(field: str | None, message: str, status: int = 400,
                 code: str | None = None) -> dict:
    """OpenAI's error body; ``field`` is its ``param``."""
    return {"error": {"message": f"{field}: {message}" if field else message,
                      "type": TYPES.get(status, "invalid_request_error"), "param": field,
                      "code": code}}


def check_model(served: ServedLM, model: str | None) -> str | None:
    """The LoRA adapter the request's ``model`` names (None: the base, by its id or left
    out); a 404 naming the served models when it names none of them."""
    if model is None or model == served.name:
        return None
    if model in served.adapters:
        return model
    known = ", ".join(repr(m) for m in (served.name, *served.adapters))
    raise HTTPException(404, f"model: this server serves {known}, not {model!r} "
                        f"(GET /v1/models)")

async def answer(worker: Worker, rows: list[Row], choices: Choices, request: Request):
    """Queue ``rows`` as one job; the response ``choices`` make of their tokens, whole or
    streamed (``choices.body.stream``)."""
    job = Job(rows, asyncio.get_running_loop())
    try:
        worker.submit(job)
    except Overloaded as err:
        return JSONResponse(openai_error(None, str(err), 429), 429, headers={"Retry-After": "1"})
    if choices.body.stream:
        return StreamingResponse(_stream(job, choices), media_type="text/event-stream")
    return await _complete(job, choices, request)


async def _complete(job: Job, choices: Choices, request: Request):
    """Wait for the job's last event (or the client's leaving); the whole response."""
    gone = asyncio.ensure_future(disconnected(request))
    try:
        while True:
            get = asyncio.ensure_future(job.queue.get())
            await asyncio.wait({get, gone}, return_when=asyncio.FIRST_COMPLETED)
            if not get.done():
                get.cancel()
                job.cancel()
                return Response(status_code=499)  # nobody reads it
            event = get.result()
            if event is DONE:
                return JSONResponse(choices.response())
            i, token = event
            if i < 0:
                return failed(token)
            if token is not None:
                choices.record(i, token)
    finally:
        gone.cancel()


async def _stream(job: Job, choices: Choices):
    """Server-sent events: what each row opens with once it joins (its echo, or its role),
    its pieces as they settle, the usage if asked, [DONE]."""
    body = choices.body
    try:
        while (event := await job.queue.get()) is not DONE:
            i, token = event
            if i < 0:
                yield _sse(failed(token, as_body=True))
                break
            for chunk in (choices.opening(i) if token is None else [choices.piece(i, token)]):
                yield _sse(chunk)
        else:
            if body.stream_options is not None and body.stream_options.include_usage:
                yield _sse(choices.usage_chunk())
        yield "data: [DONE]\n\n"
    finally:
        job.cancel()  # a no-op once done; a client gone mid-stream: its rows leave


def _sse(body: dict) -> str:
    return f"data: {json.dumps(body)}\n\n"


def failed(err: Exception, as_body: bool = False):
    """A job's error: a refused setting is the client's 400, a dead worker 503, anything else
    a bug (500, naming the error; the server steps on)."""
    if isinstance(err, UsageError):
        body, status = openai_error(getattr(err, "field", None), str(err)), 400
    elif isinstance(err, WorkerDied):
        body, status = died(err), 503
    else:
        message = str(err) if isinstance(err, StepFailed) else \
            f"internal error: {type(err).__name__}: {err}"
        body, status = openai_error(None, message, 500, "internal_error"), 500
    return body if as_body else JSONResponse(body, status)


def died(err: WorkerDied) -> dict:
    """The body of every answer once the worker has died (503)."""
    return openai_error(None, str(err), 503, "worker_died")
