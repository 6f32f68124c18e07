"""serve.seq2seq.schema: the request schema says exactly what the server accepts (schemathesis holds
the running server to it in test_schemathesis; here, the rules one by one)."""

from __future__ import annotations

import pytest
import torch
from pydantic import ValidationError

from decoderkit.serve.seq2seq.limits import ServeLimits
from decoderkit.serve.seq2seq.schema import request_model

LIMITS = ServeLimits(max_inputs=3, max_chars=12, max_len=6, max_beam=3, max_explain=2)


def test_an_integral_number_is_an_integer_and_nothing_else_is():
    model = request_model(LIMITS)
    assert model.model_validate({"inputs": ["a"], "beam": 2.0, "n_best": 2}).beam == 2
    for bad in ("2", True, 2.5, 4):
        with pytest.raises(ValidationError, match="beam"):
            model.model_validate({"inputs": ["a"], "beam": bad})


def test_sampling_bounds_are_the_dtypes_smallest_normal_in_the_schema_too():
    model = request_model(LIMITS, torch.float32)
    tiny = float(torch.finfo(torch.float32).tiny)
    top_p = model.model_json_schema()["$defs"]["Sampling"]["properties"]["top_p"]
    assert top_p["exclusiveMinimum"] == 0 and top_p["not"] == {"exclusiveMinimum": 0,
                                                                "exclusiveMaximum": tiny}
    assert model.model_validate({"inputs": ["a"], "sampling": {"top_p": tiny}}).sampling
    with pytest.raises(ValidationError, match="smallest normal float32"):
        model.model_validate({"inputs": ["a"], "sampling": {"top_p": 5e-324}})


def test_the_rules_between_fields_are_in_the_schema():
    model = request_model(LIMITS)
    rules = model.model_json_schema()["allOf"]
    n_best, sampling = (rule["anyOf"] for rule in rules)
    assert len(n_best) == LIMITS.max_beam  # k = 1..max_beam: n_best <= k <= beam
    assert {"properties": {"beam": {"maximum": 1}}} in sampling
    with pytest.raises(ValidationError, match="n_best must be <= beam"):
        model.model_validate({"inputs": ["a"], "beam": 2, "n_best": 3})
    with pytest.raises(ValidationError, match="sampling excludes beam search"):
        model.model_validate({"inputs": ["a"], "beam": 2, "sampling": {}})
