"""The HTTP API's request and response bodies as pydantic models (they are also /docs).

Request caps come from the server's ``ServeLimits``, so ``request_model(limits, dtype)`` builds
the request class per server: a value out of range is refused by pydantic with a 422 naming the
field, and /docs shows the caps. Sampling's bounds are ``generation.limits``' for the model's
dtype (a temperature of 1e-308 is 0 in float32) and its seed range; temperature and
length_penalty accept ``base.checks``' ranges, as the CLI and the library do. Strict types: "4"
is not a beam size (4.0 is: JSON Schema's integer is a number without a fraction); unknown
fields are refused (a typo must not silently fall back to a default). The schema says exactly
what is accepted (schemathesis holds the server to it): the rules between fields too (``n_best``
<= ``beam``, ``sampling`` only with beam 1), and every error's body (``ErrorBody``) and code.
"""

from __future__ import annotations

from typing import Annotated, Any

import torch
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationInfo,
    field_validator,
)

from decoderkit.base.checks import LENGTH_PENALTY, SEED, TEMPERATURE
from decoderkit.generation.limits import below_normal, temperature_range, top_p_range
from decoderkit.serve.seq2seq.limits import ServeLimits
from decoderkit.serve.fields import integer, ranged, subnormal_gap

STRICT = ConfigDict(strict=True, extra="forbid", allow_inf_nan=False)


def sampling_model(dtype: torch.dtype) -> type[BaseModel]:
    """The ``sampling`` object's class for a model computing in ``dtype``."""
    lowest = {"temperature": temperature_range(dtype).low, "top_p": top_p_range(dtype).low}
    dt = str(dtype).removeprefix("torch.")

    class Sampling(BaseModel):
        """Ancestral sampling instead of greedy/beam (excludes beam > 1)."""

        model_config = STRICT
        temperature: ranged(TEMPERATURE) = Field(
            1.0, description="softmax(logp / temperature); at least the smallest normal "
            f"{dt}", json_schema_extra=subnormal_gap(lowest["temperature"]))
        top_k: integer(0) = Field(0, description="keep the k most likely tokens (0: all)")
        top_p: float = Field(1.0, gt=0, le=1,
                             description="nucleus: the smallest set with this mass; at least "
                             f"the smallest normal {dt}",
                             json_schema_extra=subnormal_gap(lowest["top_p"]))
        seed: integer(SEED.low, SEED.high) | None = Field(
            None, description="reproducible draws (none: fresh)")

        @field_validator("temperature", "top_p", mode="before")
        @classmethod
        def _normal_in_dtype(cls, value: Any, info: ValidationInfo) -> Any:
            why = below_normal(value, lowest[info.field_name], dtype)
            if why is not None:  # why, before the bound's own word
                raise ValueError(why)
            return value

    return Sampling


def request_model(limits: ServeLimits, dtype: torch.dtype = torch.float32) -> type[BaseModel]:
    """The ``POST /v1/translate`` body class with this server's caps, for a model computing
    in ``dtype``."""
    Sampling = sampling_model(dtype)
    text = Annotated[str, StringConstraints(max_length=limits.max_chars)]

    class TranslateRequest(BaseModel):
        """Texts to translate and how to decode them (the same options for every input)."""

        model_config = STRICT | ConfigDict(json_schema_extra=_between_fields(limits.max_beam))
        inputs: list[text] = Field(min_length=1, max_length=limits.max_inputs,
                                   description="source texts")
        beam: integer(1, limits.max_beam) = Field(1, description="beam size (1: greedy); "
                                                  "absent: the model's own (a Hugging Face "
                                                  "directory's num_beams), else 1")
        n_best: integer(1, limits.max_beam) = Field(1, description="hypotheses (<= beam)")
        length_penalty: ranged(LENGTH_PENALTY) = Field(
            1.0, description="beam: log p / len ** this; absent: the model's own, else 1")
        max_len: integer(1, limits.max_len) | None = Field(
            None, description="most generated tokens (absent: the model's own max_length - "
            "1, else from the source)")
        sampling: Sampling | None = Field(None, description="sample instead of greedy/beam")
        explain: integer(0, limits.max_explain) = Field(
            0, description="alternatives per step, with attention weights (0: off)")

        @field_validator("n_best")
        @classmethod
        def _within_beam(cls, n_best: int, info: ValidationInfo) -> int:
            beam = info.data.get("beam", 1)
            if n_best > beam:
                raise ValueError(f"n_best must be <= beam ({beam})")
            return n_best

        @field_validator("sampling")
        @classmethod
        def _not_with_beam(cls, sampling: Sampling | None, info: ValidationInfo):
            beam = info.data.get("beam", 1)
            if sampling is not None and beam > 1:
                raise ValueError(f"sampling excludes beam search (beam {beam})")
            return sampling

    return TranslateRequest


def _between_fields(max_beam: int) -> dict:
    """The request's rules between fields, in JSON Schema (so that /docs and schema-driven
    clients know them): n_best <= beam (some k with n_best <= k <= beam; beam absent is 1) and
    sampling (not null) only with beam 1."""
    n_best = [{"properties": {"n_best": {"maximum": 1}}}] + [
        {"properties": {"n_best": {"maximum": k}, "beam": {"minimum": k}}, "required": ["beam"]}
        for k in range(2, max_beam + 1)]
    sampling = [{"not": {"required": ["sampling"]}}, {"properties": {"sampling": {"type": "null"}}},
                {"properties": {"beam": {"maximum": 1}}}]
    return {"allOf": [{"anyOf": n_best}, {"anyOf": sampling}]}


class ErrorBody(BaseModel):
    """Every error's body: ``error`` is "field: message"; ``errors`` lists each field at fault
    (the first is ``field``)."""

    error: str
    field: str = Field(description='the request field at fault, e.g. "sampling.top_p", '
                       '"inputs[2]", "body" or "method"')
    errors: list[dict[str, str]] = Field(description="[{field, message}] for each fault")


ERRORS = {  # the status codes the API answers besides 200, each with an ErrorBody
    400: "a body that cannot be read as text (not UTF-8)",
    401: "no or a wrong bearer token (servers started with --token)",
    413: "a body over the server's --max-body-bytes",
    422: "a body that is not JSON, a field out of its bounds or of the wrong type, a request "
         "within every field's bound that would decode more than the server's --max-work-tokens or "
         "--max-explain-values, or a feature this engine lacks (GET /v1/model lists them)",
    500: "the model failed on this request (field server, the message names the error); "
         "the server goes on with the next requests",
    503: "the queue is full (--max-queue): retry after Retry-After seconds; or the server's "
         "worker has died (field server): /health fails too, restart it",
}


def error_responses(*codes: int) -> dict:
    """FastAPI's ``responses`` for these codes: each an ``ErrorBody`` and what it means."""
    return {code: {"model": ErrorBody, "description": ERRORS[code]} for code in codes}


def request_settings(request) -> dict[str, object]:
    """The decoding settings a validated request says (the fields it sets; ``sampling``'s as
    sample and its own): the top source of ``Served.options``, so that a field left out is
    the checkpoint's own setting, as ``translate`` without the flag."""
    given = request.model_fields_set
    said = {k: getattr(request, k) for k in ("beam", "n_best", "length_penalty", "max_len",
                                            "explain") if k in given}
    s = request.sampling
    if s is not None:
        said |= dict(sample=True, temperature=s.temperature, top_k=s.top_k, top_p=s.top_p,
                     seed=s.seed)
    return said


class Hypothesis(BaseModel):
    """One of beam search's n best."""

    text: str
    tokens: list[str]
    score: float


class Result(BaseModel):
    """One input's translation, or why it has none (``error``)."""

    source: str
    source_tokens: list[str] = Field(description="the source as the model saw it")
    text: str
    tokens: list[str] = Field(description="output tokens, EOS included")
    score: float = Field(description="sum of log p (beam: / length ** length_penalty)")
    stop_reason: str = Field(description="eos or max_len")
    nbest: list[Hypothesis] | None = None
    steps: list[dict] | None = Field(None, description="with explain: per step the token, its "
                                     "alternatives, self_attention[layer][head][prefix] and "
                                     "cross_attention[layer][head][source]")
    error: str | None = None


class TranslateResponse(BaseModel):
    """Results in the order of ``inputs``."""

    results: list[Result]
