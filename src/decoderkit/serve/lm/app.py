"""The LM server's FastAPI app: OpenAI's legacy Completions API, its Chat Completions API and
their companions.

``create_lm_app(served, limits, token)``: POST /v1/completions and /v1/chat/completions
(``serve.lm.chat``; both streamed as server-sent events with ``stream``), GET /v1/models, GET
/health, GET /tokenizer_info, POST /tokenize and /detokenize, GET /metrics (Prometheus text),
the GPT explorer at / (over POST /v1/explore). Requests are checked (the schema, the engine's
features, the prompt lengths, the work bound) before they are queued; the worker
(``worker.Worker``) steps every running request together; ``answer`` makes the response. Every
error is OpenAI's body ``{"error": {"message", "type", "param", "code"}}``, in a stream too.
(No ``from __future__ import annotations``: FastAPI reads the route's body class, built per
app, at run time.)
"""

import asyncio

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException

from decoderkit.base.errors import UsageError
from decoderkit.serve.guards import check_token
from decoderkit.serve.worker import WorkerDied
from decoderkit.serve.http import (
    BODY_NOT_TEXT,
    add_page_and_guards,
    field_of,
    http_message,
    message_of,
    worker_lifespan,
)
from decoderkit.serve.fields import FieldError
from decoderkit.serve.lm.answer import STREAMED, answer, check_model, died, failed, openai_error
from decoderkit.serve.lm.chat import add_chat_route
from decoderkit.serve.lm.completions import Choices, prompts_of, rows_of
from decoderkit.serve.lm.engines import ServedLM
from decoderkit.serve.lm.explore import explore
from decoderkit.serve.lm.limits import LMLimits
from decoderkit.serve.lm.metrics import CountErrors
from decoderkit.serve.lm.schema import (
    TokenizeRequest,
    completion_model,
    ids_models,
    lm_error_responses,
)
from decoderkit.serve.lm.worker import Worker

def create_lm_app(served: ServedLM, limits: LMLimits | None = None,
                  token: str | None = None) -> FastAPI:
    """The app serving ``served`` under ``limits`` (None: defaults); with ``token``, every
    route but /health and the explorer needs ``Authorization: Bearer <token>``."""
    if token is not None:
        check_token(token)
    limits = limits or LMLimits()
    worker = Worker(served.rows(), limits.max_batch, limits.max_queue)
    app = FastAPI(title="decoderkit", summary="A decoder-only LM behind OpenAI's legacy "
                  "Completions API and its Chat Completions API", lifespan=worker_lifespan(worker))
    app.state.worker = worker
    _errors(app)
    _no_422(app)
    auth = (401,) if token is not None else ()
    _info_routes(app, served, worker, auth)
    _text_routes(app, served, lm_error_responses(400, *auth, 404, 413))
    asks = lm_error_responses(400, *auth, 404, 413, 429, 500, 503) | STREAMED
    _completion_route(app, served, worker, limits, asks)
    add_chat_route(app, served, worker, limits, asks)
    add_page_and_guards(app, "lm.html", limits.body_cap(served.config.max_len), token,
                        _guard_error)
    app.add_middleware(CountErrors, metrics=worker.metrics)  # outermost: sees every refusal
    return app


def _info_routes(app: FastAPI, served: ServedLM, worker: Worker, auth: tuple[int, ...]):
    """GET /health, /v1/models, /tokenizer_info and /metrics (``auth``: (401,) where a token
    is needed)."""
    metrics = worker.metrics

    @app.get("/health", responses=lm_error_responses(503))
    def health():
        """Liveness and the worker's counters; never needs the token. 503 once the worker
        has died."""
        counts = {"engine": served.engine, **vars(worker.counts)}
        if worker.failure is not None:
            return JSONResponse(died(worker.failure) | {"status": "failed", **counts}, 503)
        return {"status": "ok", **counts}

    @app.get("/v1/models", responses=lm_error_responses(*auth))
    def models() -> dict:
        """The served model, then each LoRA adapter beside it (its ``parent`` the base, as
        vLLM lists ``--lora-modules``): a request's ``model`` picks one."""
        base = {"id": served.name, "object": "model", "created": 0, "owned_by": "decoderkit",
                "engine": served.engine, "max_model_len": served.config.max_len,
                "parameters": served.parameters, "unavailable": served.unavailable}
        return {"object": "list", "data": [base] + [
            base | {"id": name, "parent": served.name, "parameters": count}
            for name, count in served.adapters.items()]}

    @app.get("/tokenizer_info", responses=lm_error_responses(*auth))
    def tokenizer_info() -> dict:
        """The tokenizer's special tokens, chat template and context, as vLLM answers it:
        what lm-evaluation-harness's remote tokenizer reads (with /tokenize, /detokenize)."""
        named = served.tokenizer.named
        return {"eos_token": named.eos, "bos_token": named.bos, "pad_token": named.pad,
                "unk_token": named.unk, "model_max_length": served.config.max_len,
                "chat_template": None if served.chat is None else served.chat.source}

    @app.get("/metrics", include_in_schema=False)
    def prometheus() -> Response:
        return Response(metrics.render(), media_type=metrics.CONTENT_TYPE)


def _text_routes(app: FastAPI, served: ServedLM, asks: dict) -> None:
    """POST /tokenize, /detokenize and /v1/explore (``asks``: their error responses)."""
    ExploreRequest, DetokenizeRequest = ids_models(served.vocab, served.config.max_len)

    @app.post("/tokenize", responses=asks)
    def tokenize(body: TokenizeRequest) -> dict:
        """A text's token ids (as a prompt, unless ``add_special_tokens`` is false)."""
        check_model(served, body.model)
        ids = served.encode(body.prompt, special=body.add_special_tokens)
        return {"tokens": ids, "count": len(ids), "max_model_len": served.config.max_len}

    @app.post("/detokenize", responses=asks)
    def detokenize(body: DetokenizeRequest) -> dict:
        """Token ids' text."""
        check_model(served, body.model)
        return {"prompt": served.tokenizer.decode(body.tokens)}

    @app.post("/v1/explore", responses=asks)
    async def explore_prompt(body: ExploreRequest) -> dict:
        """The explorer's view of a text or ids: tokens, attention, next-token logits, the
        logit lens."""
        if check_model(served, body.model) is not None:
            raise FieldError("model", f"the explorer shows the base model {served.name!r}, "
                             f"not its adapter {body.model!r}")
        served.check(body, ("explore",))
        ids = served.encode(body.prompt) if isinstance(body.prompt, str) \
            else body.prompt
        return await asyncio.to_thread(explore, served.model, served.tokenizer, ids)


def _completion_route(app: FastAPI, served: ServedLM, worker: Worker, limits: LMLimits,
                      asks: dict) -> None:
    """POST /v1/completions: checked, queued on ``worker``, answered whole or streamed."""
    CompletionRequest = completion_model(limits, served.config.max_len,
                                         served.vocab)

    @app.post("/v1/completions", responses=asks)
    async def completions(body: CompletionRequest, request: Request):
        """Continue each prompt ``n`` times; ``stream`` sends the tokens as they come."""
        adapter = check_model(served, body.model)
        served.check(body)
        prompts, texts = prompts_of(body, served)
        rows = rows_of(body, served, limits, prompts, body.max_tokens, body.logprobs,
                       echo=body.echo, adapter=adapter)
        return await answer(worker, rows, Choices(body, served, rows, texts), request)


def _guard_error(field: str, message: str) -> dict:
    code = "invalid_api_key" if field == "authorization" else None
    return openai_error(field, message, 401 if code else 413, code)


def _param(loc) -> str:
    """OpenAI's ``param``: the top-level field (a union's member names dropped), with the
    position inside it where pydantic gives one and the field there (``messages[1].role``)."""
    field = field_of(loc)
    if field == "body" or len(loc) < 2:
        return field
    rest = list(loc[2:])
    at = next((k for k, p in enumerate(rest) if isinstance(p, int)), None)
    if at is None:
        return str(loc[1])
    after = rest[at + 1:at + 2]
    inner = f".{after[0]}" if after and isinstance(after[0], str) and after[0].isidentifier() \
        and after[0] not in UNION_MEMBERS else ""
    return f"{loc[1]}[{rest[at]}]{inner}"


UNION_MEMBERS = ("str", "int", "float", "bool", "list", "dict")  # pydantic's names in a loc


def _message(error: dict) -> str:
    """pydantic's message; a prompt of ids past the context says so (it is no list rule)."""
    loc = error["loc"]
    ids = loc[-1:] == ("ids",) or (len(loc) > 2 and loc[-2] == "lists")
    if error["type"] == "too_long" and loc[1:2] == ("prompt",) and ids:
        ctx = error["ctx"]
        return (f"{ctx['actual_length']} token ids, more than the model's context of "
                f"{ctx['max_length']} tokens")
    return message_of(error)


def _no_422(app: FastAPI) -> None:
    """The OpenAPI schema without FastAPI's default 422: a refused field is a 400 here."""
    build = app.openapi

    def openapi() -> dict:
        if app.openapi_schema is None:
            for path in build()["paths"].values():
                for operation in path.values():
                    operation.get("responses", {}).pop("422", None)
        return app.openapi_schema

    app.openapi = openapi


def _errors(app: FastAPI) -> None:
    """Every error response in OpenAI's shape."""

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError):
        errors = exc.errors()  # of a union field: one per member; the constraint is telling
        first = next((e for e in errors if not e["type"].endswith("_type")), errors[0])
        return JSONResponse(openai_error(_param(first["loc"]), _message(first)), 400)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException):
        code = "model_not_found" if str(exc.detail).startswith("model:") else None
        message = http_message(str(exc.detail))
        field = "model" if code else "body" if message == BODY_NOT_TEXT else None
        message = message.removeprefix("model: ")
        return JSONResponse(openai_error(field, message, exc.status_code, code),
                            exc.status_code, headers=exc.headers)

    @app.exception_handler(UsageError)
    async def usage(request: Request, exc: UsageError):
        return JSONResponse(openai_error(getattr(exc, "field", None), str(exc)), 400)

    @app.exception_handler(WorkerDied)
    async def dead(request: Request, exc: WorkerDied):
        return JSONResponse(died(exc), 503)

    @app.exception_handler(Exception)  # a bug: said in OpenAI's body, not as a bare 500
    async def bug(request: Request, exc: Exception):
        return failed(exc)
