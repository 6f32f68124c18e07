"""The HTTP APIs held to their own OpenAPI schemas by schemathesis (a tool no one here wrote):
bounded generated requests, every one answered as the schema says (a schema-valid request is
accepted, an invalid one refused with a documented 4xx, never a 5xx, bodies of the documented
shapes). Another server is one more entry in APPS."""

from __future__ import annotations

import pytest

schemathesis = pytest.importorskip("schemathesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402

from decoderkit.serve.app import create_app  # noqa: E402
from decoderkit.serve.limits import ServeLimits  # noqa: E402
from decoderkit.training.seq2seq.checkpoint import load_checkpoint  # noqa: E402
from serve.serving import random_checkpoint  # noqa: E402

# small caps, so that generated requests stay cheap (a few tokens each, on a 2+2-layer model)
LIMITS = ServeLimits(max_body_bytes=4096, max_inputs=3, max_chars=12, max_len=6, max_beam=3,
                     max_explain=2)


def translation_app(directory):
    return create_app(load_checkpoint(random_checkpoint(directory / "ckpt", eos_bias=1.0)),
                      LIMITS)


# name -> (the app, given a folder; paths its schema must have)
APPS = {"translation": (translation_app, {"/v1/translate", "/v1/model", "/health"})}
EXAMPLES = 150  # per app and mode: bounded in count (and each request in cost, by LIMITS)


@pytest.mark.parametrize("mode", ["positive", "negative"])
@pytest.mark.parametrize("name", list(APPS))
def test_every_generated_request_is_answered_as_the_schema_says(name, mode, tmp_path):
    """``EXAMPLES`` requests across the schema's operations, schema-valid ones (to be accepted)
    or invalid ones (to be refused with a documented 4xx), each called in process and checked
    by schemathesis' own checks. (Its pytest plug-in's lazy fixture does not run under this
    pytest: hypothesis drives the schema's strategy here instead.)"""
    make, expected = APPS[name]
    schema = schemathesis.openapi.from_asgi("/openapi.json", make(tmp_path))
    paths = {result.ok().path for result in schema.get_all_operations()}
    assert paths >= expected, paths

    @given(case=schema.as_strategy(schemathesis.GenerationMode(mode)))
    @settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    def call(case):
        case.call_and_validate()

    call()
