"""The bound on what one request may cost: ``request_cost`` against what a decode really
computes and returns, and the server refusing a request whose fields pass one by one but
whose product does not (the 349 MB explain response of issue 19)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from decoderkit.base.errors import UsageError
from decoderkit.generation.seq2seq.translate import DecodeOptions, translate_lines
from decoderkit.serve.seq2seq.app import create_app
from decoderkit.serve.seq2seq.limits import ServeLimits, check_cost, request_cost
from decoderkit.serve.fields import TooMuchWork
from decoderkit.serve.lm.limits import LMLimits
from decoderkit.training.seq2seq.checkpoint import load_checkpoint
from serve.serving import slow_checkpoint

LINES = ["12 mar 2020", "3", "", "dec 31, 1999"]


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):  # never stops early: every input runs to its bound
    return load_checkpoint(slow_checkpoint(tmp_path_factory.mktemp("limits") / "ckpt"))


def lengths(ckpt, lines):
    return [len(ckpt.src_tokenizer.encode(line)) for line in lines]


def numbers(step: dict) -> int:
    """The numbers one explain step returns: its token, the alternatives, every weight."""
    weights = sum(len(head) for key in ("self_attention", "cross_attention")
                  for layer in step[key] for head in layer)
    return 1 + len(step["alternatives"]) + weights


@pytest.mark.parametrize("options", [DecodeOptions(explain=3), DecodeOptions(explain=2,
                                                                             max_len=9)])
def test_the_cost_is_what_the_decode_computes_and_returns(ckpt, options):
    results = translate_lines(ckpt, LINES, options)
    tokens, values = request_cost(ckpt.config, lengths(ckpt, LINES), options)
    assert tokens == sum(len(r.tokens) for r in results)  # each ran to its bound
    assert values == sum(numbers(s) for r in results for s in r.steps)


def test_beam_multiplies_the_tokens_and_explain_off_returns_none(ckpt):
    one = request_cost(ckpt.config, lengths(ckpt, LINES), DecodeOptions())
    four = request_cost(ckpt.config, lengths(ckpt, LINES), DecodeOptions(beam=4))
    assert four == (4 * one[0], 0) and one[0] > 0


def test_a_line_too_long_for_the_model_costs_nothing(ckpt):
    too_long = ckpt.config.max_len + 1
    assert request_cost(ckpt.config, [too_long, 0], DecodeOptions(explain=5)) == (0, 0)


def test_check_cost_names_the_limit_and_the_field(ckpt):
    options = DecodeOptions(explain=3)
    tokens, values = request_cost(ckpt.config, lengths(ckpt, LINES), options)
    check_cost(ServeLimits(max_work_tokens=tokens, max_explain_values=values), ckpt.config,
               lengths(ckpt, LINES), options)  # exactly at both limits: accepted
    want = f"max_work_tokens {tokens - 1} \\(--max-work-tokens\\)"
    with pytest.raises(TooMuchWork, match=want) as e:
        check_cost(ServeLimits(max_work_tokens=tokens - 1), ckpt.config, lengths(ckpt, LINES),
                   options)
    assert e.value.field == "inputs"
    with pytest.raises(TooMuchWork, match=f"may hold {values} numbers") as e:
        check_cost(ServeLimits(max_explain_values=values - 1), ckpt.config,
                   lengths(ckpt, LINES), options)
    assert e.value.field == "explain" and "--max-explain-values" in str(e.value)


@pytest.mark.parametrize("name", ["max_work_tokens", "max_explain_values"])
@pytest.mark.parametrize("value", [0, -1, 2.5, True, None])
def test_the_limits_themselves_are_checked(name, value):
    with pytest.raises(UsageError, match=rf"{name} must be an integer in \[1, 1048576\], "
                                         rf"got {value!r}"):
        ServeLimits(**{name: value})


@pytest.mark.parametrize("limits", [ServeLimits, LMLimits])
@pytest.mark.parametrize("value", [0, 1 << 31, 2.5, True])
def test_the_body_cap_is_bounded_in_both_servers(limits, value):
    """A body is read whole before it is parsed: the cap is at most 1 GiB."""
    with pytest.raises(UsageError, match=r"max_body_bytes must be an integer in "
                                         r"\[1, 1073741824\]"):
        limits(max_body_bytes=value)
    assert limits(max_body_bytes=1 << 30).max_body_bytes == 1 << 30


def test_the_issue_request_is_refused_before_any_decoding(ckpt):
    """32 inputs x 256 steps x explain, each field within the defaults: refused, not served."""
    inputs = ["12 mar 2020"] * 32
    with TestClient(create_app(ckpt, ServeLimits())) as client:
        r = client.post("/v1/translate", json={"inputs": inputs, "max_len": 256, "explain": 10})
        assert r.status_code == 422 and r.json()["field"] == "explain", r.text
        assert "max_explain_values 1000000 (--max-explain-values)" in r.json()["error"]
        r = client.post("/v1/translate", json={"inputs": inputs, "max_len": 256, "beam": 8})
        assert r.status_code == 422 and r.json()["field"] == "inputs", r.text
        assert "max_work_tokens 32768 (--max-work-tokens)" in r.json()["error"]
        assert client.get("/health").json()["sentences"] == 0  # nothing was decoded
        r = client.post("/v1/translate", json={"inputs": inputs[:1], "max_len": 20,
                                               "explain": 10})
        assert r.status_code == 200 and len(r.json()["results"][0]["steps"]) == 20
        assert client.get("/v1/model").json()["limits"]["max_explain_values"] == 1_000_000
