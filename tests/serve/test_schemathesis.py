"""The HTTP APIs held to their own OpenAPI schemas by schemathesis (a tool no one here wrote):
bounded generated requests, every one answered as the schema says (a schema-valid request is
accepted, an invalid one refused with a documented 4xx, never a 5xx, bodies of the documented
shapes). Another server is one more entry in APPS."""

from __future__ import annotations

from dataclasses import replace

import pytest

schemathesis = pytest.importorskip("schemathesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from schemathesis.specs.openapi.checks import positive_data_acceptance  # noqa: E402

from decoderkit.serve.seq2seq.app import create_app  # noqa: E402
from decoderkit.serve.seq2seq.limits import ServeLimits  # noqa: E402
from decoderkit.serve.lm.app import create_lm_app  # noqa: E402
from decoderkit.serve.lm.engines import from_lm  # noqa: E402
from decoderkit.serve.lm.limits import LMLimits  # noqa: E402
from decoderkit.text.lm.chat import ChatTemplate  # noqa: E402
from decoderkit.training.seq2seq.checkpoint import load_checkpoint  # noqa: E402
from serve.lm.lm_serving import tiny_lm  # noqa: E402
from serve.serving import random_checkpoint  # noqa: E402

# small caps, so that generated requests stay cheap (a few tokens each, on a 2+2-layer model)
LIMITS = ServeLimits(max_body_bytes=4096, max_inputs=3, max_chars=12, max_len=6, max_beam=3,
                     max_explain=2)


def translation_app(directory):
    return create_app(load_checkpoint(random_checkpoint(directory / "ckpt", eos_bias=1.0)),
                      LIMITS)


# the LM server's: a few prompts, completions and tokens each, so that the rules JSON Schema
# cannot state across fields (prompts x n within max_batch, x (prompt + max_tokens) within
# the server's max_tokens) do not bind here; a text's tokens may pass the context (see
# too_many_tokens)
CONTEXT = 64
LM_LIMITS = LMLimits(max_body_bytes=1024, max_inputs=2, max_n=2, max_len=4,
                     max_work_tokens=2 * 2 * (CONTEXT + 4), max_batch=4, max_queue=64)


def lm_app(directory):
    model, tokenizer = tiny_lm(context=CONTEXT)
    chat = ChatTemplate("{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
                        "{% if add_generation_prompt %}assistant:{% endif %}")
    return create_lm_app(replace(from_lm(model, tokenizer, "tiny"), chat=chat), LM_LIMITS)


# name -> (the app, given a folder; paths its schema must have)
APPS = {"translation": (translation_app, {"/v1/translate", "/v1/model", "/health"}),
        "lm": (lm_app, {"/v1/completions", "/v1/chat/completions", "/v1/models", "/tokenize",
                        "/detokenize", "/v1/explore", "/health"})}
EXAMPLES = 150  # per app and mode: bounded in count (and each request in cost, by LIMITS)
# A body over --max-body-bytes is refused with 413 (documented) whatever it holds: a rejection
# of invalid data, and the one answer to valid data that JSON Schema cannot bound in bytes.
STATUSES = {"positive_data_acceptance": ["2XX", "401", "404", "413", "429"],
            "negative_data_rejection": ["400", "401", "404", "405", "413", "422", "429"]}
CONFIG = schemathesis.config.SchemathesisConfig.from_dict(
    {"checks": {name: {"expected-statuses": codes} for name, codes in STATUSES.items()}})


@pytest.mark.parametrize("mode", ["positive", "negative"])
@pytest.mark.parametrize("name", list(APPS))
def test_every_generated_request_is_answered_as_the_schema_says(name, mode, tmp_path):
    """``EXAMPLES`` requests across the schema's operations, schema-valid ones (to be accepted)
    or invalid ones (to be refused with a documented 4xx), each called in process and checked
    by schemathesis' own checks. (Its pytest plug-in's lazy fixture does not run under this
    pytest: hypothesis drives the schema's strategy here instead.)"""
    make, expected = APPS[name]
    schema = schemathesis.openapi.from_asgi("/openapi.json", make(tmp_path), config=CONFIG)
    paths = {result.ok().path for result in schema.get_all_operations()}
    assert paths >= expected, paths

    @given(case=schema.as_strategy(schemathesis.GenerationMode(mode)))
    @settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    def call(case):
        response = case.call_and_validate(excluded_checks=[positive_data_acceptance],
                                          additional_checks=[accepted_unless_too_many_tokens])
        answered.add((case.path, response.status_code))

    answered: set[tuple[str, int]] = set()
    call()
    ok = {path for path, status in answered if status == 200}
    assert ok >= (expected if mode == "positive" else set()), answered  # not all refused


def accepted_unless_too_many_tokens(ctx, response, case):
    """schemathesis' positive_data_acceptance, but for a 400 naming a text prompt's tokens (a
    completion's prompt, or the chat's messages as the template renders them): JSON Schema
    bounds a text in characters, the server in tokens (the context, the explorer's), and only
    the tokenizer knows how many a text has."""
    if response.status_code == 400 and too_many_tokens(case.body, response.json()):
        return None
    return positive_data_acceptance(ctx, response, case)


def too_many_tokens(sent, answer) -> bool:
    """The request's prompt is text and the error is the prompt's token count, or the prompt
    and the length asked together pass the context (``check_room``: a rule across fields,
    as the work limit, that JSON Schema cannot state)."""
    error = answer.get("error") if isinstance(answer, dict) else None
    if not isinstance(error, dict) or " tokens" not in error.get("message", ""):
        return False
    if error.get("param") in ("max_tokens", "max_completion_tokens"):
        return "past the model's context" in error["message"]
    if isinstance(sent, dict) and "messages" in sent:
        return error.get("param") == "messages"
    prompt = sent.get("prompt") if isinstance(sent, dict) else None
    texts = [prompt] if isinstance(prompt, str) else prompt if isinstance(prompt, list) else []
    return bool(texts) and all(isinstance(t, str) for t in texts) and \
        error.get("param") == "prompt"
