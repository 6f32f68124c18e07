"""serve.lm.schema: the id pattern the OpenAPI schema publishes for logit_bias keys matches
exactly the decimal ids below the vocabulary size (checked against every number up to 3x
it), and the request model refuses the others once, naming the key."""

from __future__ import annotations

import re

import pytest
from pydantic import ValidationError

from decoderkit.serve.lm.limits import LMLimits
from decoderkit.serve.lm.schema import completion_model, id_pattern


@pytest.mark.parametrize("n", [1, 2, 9, 10, 11, 65, 100, 101, 257, 1000, 50257])
def test_the_id_pattern_matches_exactly_the_ids_below_n(n):
    pattern = re.compile(id_pattern(n))
    matched = [str(i) for i in range(3 * n + 30) if pattern.fullmatch(str(i))]
    assert matched == [str(i) for i in range(n)]
    assert not any(pattern.fullmatch(s) for s in ("", "00", "01", f"0{n - 1}", "-1", "1.0"))


def test_logit_bias_keys_are_refused_by_the_model_and_named_in_the_schema():
    Request = completion_model(LMLimits(), context=16, vocab_size=300)
    assert Request(prompt=[1], logit_bias={"299": 1.0}).logit_bias == {"299": 1.0}
    for key in ("300", "007", "x", "٣"):  # past the vocabulary, leading zero, no id, not ASCII
        with pytest.raises(ValidationError, match="keys must be token ids in \\[0, 300\\)"):
            Request(prompt=[1], logit_bias={key: 1.0})
    schema = Request.model_json_schema()["properties"]["logit_bias"]["anyOf"][0]
    assert schema["additionalProperties"] is False
    assert list(schema["patternProperties"]) == [f"^{id_pattern(300)}$"]
