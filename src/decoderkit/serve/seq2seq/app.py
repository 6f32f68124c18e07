"""The FastAPI app: /health, /v1/model, /v1/translate, the explorer page at / (``serve.http``).

``create_app(engine, limits, token)`` wires a loaded checkpoint (or any engine, as a
``Served``) to a ``Batcher`` whose worker thread runs its ``translate``; a request is
checked against the engine's features and the limits' cost bound before it is queued. The
app's lifespan starts the worker and, at shutdown (after the
server has finished its in-flight requests), drains and stops it. Every error is JSON in one
shape (``guards.error_body``) naming the field at fault. (No ``from __future__ import
annotations`` here: FastAPI reads the route's body class, built per app, at run time.)
"""

import asyncio

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException

from decoderkit.base.errors import UsageError
from decoderkit.serve.seq2seq.batcher import Batcher
from decoderkit.serve.worker import Overloaded, WorkerDied
from decoderkit.serve.seq2seq.engines import Served, from_checkpoint
from decoderkit.serve.guards import check_token, error_body
from decoderkit.serve.http import (
    add_page_and_guards,
    disconnected,
    field_of,
    http_message,
    message_of,
    worker_lifespan,
)
from decoderkit.serve.seq2seq.limits import ServeLimits, check_cost
from decoderkit.serve.seq2seq.schema import (
    TranslateResponse,
    error_responses,
    request_model,
    request_settings,
)


def create_app(engine, limits: ServeLimits | None = None, token: str | None = None) -> FastAPI:
    """The app serving ``engine`` (a loaded ``Checkpoint``, or a ``Served``) under
    ``limits`` (None: defaults); with ``token``, API routes need ``Authorization: Bearer
    <token>``."""
    if token is not None:
        check_token(token)
    served = engine if isinstance(engine, Served) else from_checkpoint(engine)
    limits = (limits or ServeLimits()).for_model(served.config.max_len)
    batcher = Batcher(lambda lines, options: served.translate(lines, options, limits.max_batch),
                      limits.max_batch, limits.max_wait_ms, limits.max_queue)
    app = FastAPI(title="decoderkit", summary="Translate with a decoderkit checkpoint",
                  lifespan=worker_lifespan(batcher))
    app.state.batcher = batcher
    _errors(app)
    _routes(app, served, batcher, limits, (401,) if token is not None else ())
    return add_page_and_guards(app, "index.html", limits.max_body_bytes, token)


def _routes(app: FastAPI, served: Served, batcher: Batcher, limits: ServeLimits,
            auth: tuple[int, ...]) -> None:
    """/health, /v1/model and /v1/translate (``auth``: (401,) where a token is needed)."""
    TranslateRequest = request_model(limits, served.dtype)
    model_info = _model_info(served, limits)

    @app.get("/health", responses=error_responses(503))
    def health():
        """Liveness and the batcher's counters; never needs the token. 503 once the worker
        has died."""
        if batcher.failure is not None:
            return JSONResponse(error_body("server", str(batcher.failure))
                                | {"status": "failed", **vars(batcher.stats)}, 503)
        return {"status": "ok", **vars(batcher.stats)}

    @app.get("/v1/model", responses=error_responses(*auth))
    def model() -> dict:
        """The engine and the request features it lacks, the model's config, parameter count,
        tokenizer sizes, training step and this server's limits."""
        return model_info

    @app.post("/v1/translate", response_model=TranslateResponse,
              responses=error_responses(400, *auth, 413, 422, 500, 503))
    async def translate(body: TranslateRequest, request: Request):
        """Translate ``inputs``; requests arriving together are decoded as one batch."""
        options = served.options(request_settings(body))
        served.check(options)
        check_cost(limits, served.config, [len(served.src_tokenizer.encode(text))
                                           for text in body.inputs], options)
        try:
            job = batcher.submit(body.inputs, options)
        except Overloaded as err:
            return JSONResponse(error_body("inputs", str(err)), status_code=503,
                                headers={"Retry-After": "1"})
        waiting = asyncio.wrap_future(job.future)
        gone = asyncio.ensure_future(disconnected(request))
        await asyncio.wait({waiting, gone}, return_when=asyncio.FIRST_COMPLETED)
        gone.cancel()
        if not waiting.done():  # the client left: drop the job if its batch has not started
            job.cancel()
            return Response(status_code=499)  # nobody reads it
        results = [r.to_dict() for r in waiting.result()]
        return JSONResponse({"results": results})  # the shape of TranslateResponse, unchecked


def _model_info(served: Served, limits: ServeLimits) -> dict:
    return {
        "engine": served.engine,
        "unavailable": served.unavailable,
        "config": served.config.to_dict(),
        "parameters": served.parameters,
        "src_vocab_size": served.src_tokenizer.vocab_size,
        "tgt_vocab_size": served.tgt_tokenizer.vocab_size,
        "step": served.step,
        "limits": vars(limits),
    }


def _errors(app: FastAPI) -> None:
    """Every error response in the one JSON shape."""

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError):
        errors = [{"field": field_of(e["loc"]), "message": message_of(e)} for e in exc.errors()]
        return JSONResponse(error_body(errors[0]["field"], errors[0]["message"], errors), 422)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException):
        field = {400: "body", 413: "body", 405: "method"}.get(exc.status_code, "path")
        return JSONResponse(error_body(field, http_message(str(exc.detail))), exc.status_code,
                            headers=exc.headers)

    @app.exception_handler(UsageError)
    async def usage(request: Request, exc: UsageError):
        return JSONResponse(error_body(getattr(exc, "field", "inputs"), str(exc)), 422)

    @app.exception_handler(WorkerDied)
    async def died(request: Request, exc: WorkerDied):
        return JSONResponse(error_body("server", str(exc)), 503)

    @app.exception_handler(Exception)  # a bug: said in the one shape, not as a bare 500
    async def bug(request: Request, exc: Exception):
        return JSONResponse(error_body("server", f"internal error: {type(exc).__name__}: "
                                                 f"{exc}"), 500)

