"""The LM API's request bodies as pydantic models, OpenAI's legacy Completions fields.

Built per server (``completion_model(limits, context, vocab_size)``): every cap comes from its
``LMLimits`` and the model, so a value out of range is refused with a 400 naming the field.
Strict types (``"4"`` is not a token count) and unknown fields refused, as the translation
API; sampling's numbers bounded for float32 as ``generation.limits`` says.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

import torch
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    StringConstraints,
    Tag,
    WithJsonSchema,
)

from decoderkit.base.checks import SEED
from decoderkit.generation.limits import below_normal, temperature_range, top_p_range
from decoderkit.serve.fields import integer, subnormal_gap
from decoderkit.serve.lm.limits import (
    MAX_BIASES,
    MAX_DETOKENIZE,
    MAX_EXPLORE_TOKENS,
    MAX_LOGPROBS,
    MAX_MESSAGES,
    MAX_PROMPT_CHARS,
    MAX_STOP_CHARS,
    MAX_STOPS,
    OPENAI_BIAS,
    OPENAI_PENALTY,
    OPENAI_TEMPERATURE,
    LMLimits,
)
from decoderkit.text.lm.chat import ROLES

STRICT = ConfigDict(strict=True, extra="forbid", allow_inf_nan=False)
PromptText = Annotated[str, StringConstraints(min_length=1, max_length=MAX_PROMPT_CHARS)]
UNSET = "; unset: the model's generation_config.json's, else this default"  # sampling fields
STREAM_RULE = {  # stream_options only with stream: true (serve.lm.limits.check_stream_options)
    "if": {"properties": {"stream_options": {"type": "object"}}, "required": ["stream_options"]},
    "then": {"properties": {"stream": {"const": True}}, "required": ["stream"]}}


class StreamOptions(BaseModel):
    """``stream_options``: with ``include_usage`` a last chunk carries the usage."""

    model_config = STRICT
    include_usage: bool = False


class TextPart(BaseModel):
    """A text part of a message's content."""

    model_config = STRICT
    type: Literal["text"]
    text: Annotated[str, StringConstraints(max_length=MAX_PROMPT_CHARS)]


class ChatMessage(BaseModel):
    """One message: its role and its text (a string, or text parts joined by newlines)."""

    model_config = STRICT
    role: Literal[ROLES]
    content: Annotated[str, StringConstraints(max_length=MAX_PROMPT_CHARS)] | \
        Annotated[list[TextPart], Field(min_length=1, max_length=MAX_MESSAGES)]
    name: str | None = Field(None, max_length=MAX_STOP_CHARS,
                             description="the speaker's name, passed to the template")


def prompt_kind(value) -> str:
    """Which of the prompt's forms ``value`` has (its first item decides), so a refusal
    names that form's rule (65 ids on a 64-token model: the context, not the prompt count)."""
    if isinstance(value, list) and value:
        first = value[0]
        return "lists" if isinstance(first, list) else "texts" if isinstance(first, str) \
            else "ids"
    return "texts" if isinstance(value, list) else "text"


def completion_model(limits: LMLimits, context: int, vocab_size: int) -> type[BaseModel]:
    """The ``POST /v1/completions`` body class of a server of a ``context``-token model."""
    token = integer(0, vocab_size - 1)
    ids = Annotated[list[token], Field(min_length=1, max_length=context)]
    many = dict(min_length=1, max_length=limits.max_inputs)

    class CompletionRequest(sampling_model(limits, context, vocab_size)):
        """OpenAI's legacy completion request (``stream`` for server-sent events)."""

        prompt: Annotated[
            Annotated[PromptText, Tag("text")]
            | Annotated[list[PromptText], Field(**many), Tag("texts")]
            | Annotated[ids, Tag("ids")] | Annotated[list[ids], Field(**many), Tag("lists")],
            Discriminator(prompt_kind)] = Field(
                description="a text, texts, token ids, or lists of token ids")
        max_tokens: integer(0, limits.token_cap(context)) = Field(16,
                                description="most new tokens (0 with echo: score the prompt)")
        echo: bool = Field(False, description="the prompt before the completion")
        logprobs: integer(0, MAX_LOGPROBS) | None = Field(
            None, description="each token's log p and the N most likely")

    return CompletionRequest


def chat_model(limits: LMLimits, context: int, vocab_size: int) -> type[BaseModel]:
    """The ``POST /v1/chat/completions`` body class of a server of a ``context``-token model:
    the shared fields, ``messages``, and chat's names for the length and log-probs."""
    new_tokens = integer(1, limits.token_cap(context))

    class ChatRequest(sampling_model(limits, context, vocab_size)):
        """OpenAI's chat completion request (``stream`` for server-sent events)."""

        model_config = STRICT | ConfigDict(json_schema_extra={"allOf": [  # the route's 400s
            STREAM_RULE, {"if": {"properties": {"top_logprobs": {"type": "integer"}},
                                 "required": ["top_logprobs"]},
                          "then": {"properties": {"logprobs": {"const": True}},
                                   "required": ["logprobs"]}}]})

        messages: Annotated[list[ChatMessage], Field(min_length=1, max_length=MAX_MESSAGES)] = \
            Field(description="the conversation so far, rendered by the model's chat template")
        max_tokens: new_tokens | None = Field(None, description="most new tokens (default: "
                                              "what the context leaves after the prompt)")
        max_completion_tokens: new_tokens | None = Field(None, description="max_tokens' newer "
                                                         "name (give one)")
        logprobs: bool = Field(False, description="each token's log p")
        top_logprobs: integer(0, MAX_LOGPROBS) | None = Field(
            None, description="with logprobs: the N most likely at each token")

    return ChatRequest


def sampling_model(limits: LMLimits, context: int, vocab_size: int) -> type[BaseModel]:
    """The fields the completion and chat requests share (how the tokens are chosen, how many,
    where they stop, how they are sent), each capped by ``limits`` and the model."""
    stop_text = Annotated[str, StringConstraints(min_length=1, max_length=MAX_STOP_CHARS)]
    tiny = temperature_range(torch.float32).low  # float32's smallest normal

    class SamplingRequest(BaseModel):
        model_config = STRICT | ConfigDict(json_schema_extra={"allOf": [STREAM_RULE]})
        model: str | None = Field(None, description="the served model's id (GET /v1/models)")
        temperature: Annotated[float, AfterValidator(_normal_in_float32)] = Field(
            1.0, ge=0.0, le=OPENAI_TEMPERATURE, description="0: greedy" + UNSET,
            json_schema_extra=subnormal_gap(tiny))
        top_p: Annotated[float, AfterValidator(_normal_in_float32)] = Field(
            1.0, gt=0.0, le=1.0, description="nucleus mass (1: all)" + UNSET,
            json_schema_extra=subnormal_gap(top_p_range(torch.float32).low))
        top_k: integer(-1, vocab_size) = Field(
            0, description="k most likely (0, -1: all)" + UNSET)
        n: integer(1, limits.max_n) = Field(1, description="completions per prompt")
        seed: integer(SEED.low, SEED.high) | None = Field(
            None, description="reproducible draws (choice i: (seed + i) mod 2^32)")
        stop: stop_text | Annotated[list[stop_text], Field(max_length=MAX_STOPS)] | None = Field(
            None, description="texts that end a completion, never returned")
        presence_penalty: float = Field(0.0, ge=-OPENAI_PENALTY, le=OPENAI_PENALTY)
        frequency_penalty: float = Field(0.0, ge=-OPENAI_PENALTY, le=OPENAI_PENALTY)
        logit_bias: logit_bias_type(vocab_size) | None = Field(
            None, description="token id (as a string) -> added to its logit")
        stream: bool = False
        stream_options: StreamOptions | None = None
        user: str | None = Field(None, max_length=MAX_STOP_CHARS, description="not used")

    return SamplingRequest


def _normal_in_float32(value: float) -> float:
    """temperature (0: greedy) and top_p: 0 or a normal float32, never one between."""
    why = below_normal(value, temperature_range(torch.float32).low, torch.float32)
    if why is not None:
        raise ValueError(why)
    return value


def logit_bias_type(vocab_size: int):
    """``logit_bias``: at most ``MAX_BIASES`` token ids, each a decimal string in [0,
    vocab_size) (the schema's pattern says exactly which), to a bias of at most OPENAI_BIAS
    either way."""
    pattern = id_pattern(vocab_size)

    def token_key(key: str) -> str:
        if re.fullmatch(pattern, key) is None:
            raise ValueError(f"keys must be token ids in [0, {vocab_size}) written in decimal "
                             f"without leading zeros")  # the key is added: "got '...'"
        return key

    key = Annotated[str, AfterValidator(token_key),
                    WithJsonSchema({"type": "string", "pattern": f"^{pattern}$"})]
    bias = Annotated[float, Field(ge=-OPENAI_BIAS, le=OPENAI_BIAS)]
    return Annotated[dict[key, bias], Field(max_length=MAX_BIASES, json_schema_extra={
        "additionalProperties": False})]


def id_pattern(n: int) -> str:
    """A regular expression matching exactly the decimal integers in [0, n) (n >= 1), no
    leading zeros: the numbers shorter than n - 1's digits, then those as long, digit by
    digit (n 50257: 0|[1-9][0-9]{0,3}|[1-4][0-9]{4}|50[0-1][0-9]{2}|502[0-4][0-9]{1}|5025[0-6])."""
    top = str(n - 1)
    k = len(top)
    parts = ["0"] + ([f"[1-9][0-9]{{0,{k - 2}}}"] if k > 1 else [])
    for i, digit in enumerate(top):
        low, high = (1 if i == 0 else 0), int(digit) - (i < k - 1)
        if low <= high:
            rest = f"[0-9]{{{k - i - 1}}}" if i < k - 1 else ""
            parts.append(f"{top[:i]}[{low}-{high}]{rest}")
    return "(?:" + "|".join(parts) + ")"


class TokenizeRequest(BaseModel):
    """``POST /tokenize``: a text to token ids."""

    model_config = STRICT
    model: str | None = None
    prompt: Annotated[str, StringConstraints(max_length=MAX_PROMPT_CHARS)]
    add_special_tokens: bool = Field(True, description="false: the text's ids alone, without "
                                     "what the tokenizer adds to a prompt (a BOS); vLLM's field, "
                                     "which lm-evaluation-harness's remote tokenizer sends")


def ids_models(vocab_size: int, context: int) -> tuple[type[BaseModel], type[BaseModel]]:
    """(``POST /v1/explore``'s, ``POST /detokenize``'s) body classes of a ``context``-token
    model with this many token ids: an id outside [0, vocab_size), or more ids than the
    explorer shows, is refused by the schema itself."""
    token = integer(0, vocab_size - 1)
    shown = min(MAX_EXPLORE_TOKENS, context)

    class ExploreRequest(BaseModel):
        """``POST /v1/explore``: a text or token ids for the explorer page."""

        model_config = STRICT
        model: str | None = None
        prompt: PromptText | Annotated[list[token], Field(min_length=1, max_length=shown)]

    class DetokenizeRequest(BaseModel):
        """``POST /detokenize``: token ids to their text."""

        model_config = STRICT
        model: str | None = None
        tokens: list[token] = Field(max_length=MAX_DETOKENIZE)

    return ExploreRequest, DetokenizeRequest


class OpenAIErrorDetail(BaseModel):
    """OpenAI's error object: ``param`` the request field at fault (None: the request)."""

    message: str
    type: str
    param: str | None
    code: str | None


class OpenAIError(BaseModel):
    """Every error's body (OpenAI's shape)."""

    error: OpenAIErrorDetail


LM_ERRORS = {  # the status codes the LM API answers besides 200, each with an OpenAIError
    400: "a body that is not JSON, a field out of its bounds or of the wrong type, a request "
         "over the server's --max-work-tokens, or a feature this engine lacks",
    401: "no or a wrong bearer token (servers started with --token)",
    404: "model names a model this server does not serve (GET /v1/models)",
    413: "a body over the server's --max-body-bytes",
    429: "the queue is full (--max-queue): retry after Retry-After seconds",
    500: "the model failed on a step this request was in (code internal_error, the message "
         "names the error); the requests in other steps are unaffected",
    503: "the server's worker has died (code worker_died): /health fails too; restart it",
}


def lm_error_responses(*codes: int) -> dict:
    """FastAPI's ``responses`` for these codes: each an ``OpenAIError`` and what it means."""
    return {code: {"model": OpenAIError, "description": LM_ERRORS[code]} for code in codes}
