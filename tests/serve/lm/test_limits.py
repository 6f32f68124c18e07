"""serve.lm.limits through the app: one context rule for both routes (prompt + the length
asked within the model's context, a 400 naming the field and the context, as OpenAI and
vLLM), ``stream_options`` only with ``stream``, bounds in the words a person writes, and the
body cap sized from the model's context."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import replace

import pytest
from fastapi.testclient import TestClient

from decoderkit.serve.lm.app import create_lm_app
from decoderkit.serve.lm.engines import from_lm
from decoderkit.serve.lm.limits import LMLimits
from decoderkit.text.lm.chat import ChatTemplate
from serve.lm.lm_serving import tiny_lm

CHAT = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}{% endfor %}"
        "{% if add_generation_prompt %}<|assistant|>{% endif %}")
TEXT = "The quick brown fox jumps over the lazy dog. A stitch in time"
MESSAGES = [{"role": "user", "content": TEXT}]


def client(context: int = 64, limits: LMLimits | None = None) -> TestClient:
    model, tokenizer = tiny_lm(context=context)
    served = replace(from_lm(model, tokenizer, "tiny"), chat=ChatTemplate(CHAT))
    return TestClient(create_lm_app(served, limits or LMLimits()))


@pytest.fixture(scope="module")
def http():
    with client() as c:
        yield c


def refused(http, route: str, body: dict, param: str) -> str:
    r = http.post(route, json=body)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == param
    return error["message"]


@pytest.mark.parametrize("route, body, field", [
    ("/v1/completions", {"prompt": TEXT, "max_tokens": 64}, "max_tokens"),
    ("/v1/completions", {"prompt": [TEXT, "a"], "max_tokens": 60}, "max_tokens"),
    ("/v1/chat/completions", {"messages": MESSAGES, "max_tokens": 64}, "max_tokens"),
    ("/v1/chat/completions", {"messages": MESSAGES, "max_completion_tokens": 60},
     "max_completion_tokens"),
])
def test_a_length_past_the_context_is_refused_on_both_routes(http, route, body, field):
    """main: chat took max_tokens 64 after a 45-token conversation on a 64-token model and
    generated past the context (sliding); one rule (``check_room``) for both routes."""
    message = refused(http, route, body, field)
    assert re.search(rf"has (\d+) tokens and {field} asks \d+ more: \d+, past the model's "
                     r"context of 64 tokens \(at most \d+ fit\)", message), message


def test_what_fits_is_answered_within_the_context(http):
    n = len(http.post("/tokenize", json={"prompt": TEXT}).json()["tokens"])
    out = http.post("/v1/completions", json={"prompt": TEXT, "max_tokens": 64 - n,
                                             "temperature": 0, "logit_bias": {"300": -100}})
    assert out.status_code == 200 and out.json()["usage"]["total_tokens"] <= 64
    reply = http.post("/v1/chat/completions", json={"messages": MESSAGES, "temperature": 0,
                                                    "logit_bias": {"300": -100}}).json()
    assert reply["usage"]["total_tokens"] == 64  # the default: what the context leaves
    assert reply["choices"][0]["finish_reason"] == "length"
    full = [{"role": "user", "content": TEXT * 3}]
    message = refused(http, "/v1/chat/completions", {"messages": full}, "messages")
    assert "context" in message


@pytest.mark.parametrize("route, body", [
    ("/v1/completions", {"prompt": "a", "max_tokens": 2}),
    ("/v1/chat/completions", {"messages": MESSAGES, "max_tokens": 2}),
])
def test_stream_options_without_stream_is_400(http, route, body):
    options = {"stream_options": {"include_usage": True}}
    for stream in ({}, {"stream": False}):
        message = refused(http, route, body | options | stream, "stream_options")
        assert message == "stream_options: is only allowed with stream: true"
    with http.stream("POST", route, json=body | options | {"stream": True}) as r:
        assert r.status_code == 200 and '"usage"' in r.read().decode()


@pytest.mark.parametrize("field, value, words", [
    ("top_p", 0, "greater than 0"), ("top_p", -1.0, "greater than 0"),
    ("top_p", 1e-40, "at least 1.18e-38, the smallest normal float32"),
    ("temperature", 1e-40, "at least 1.18e-38, the smallest normal float32"),
    ("temperature", 1e-320, "at least 1.18e-38"), ("top_p", 1.5, "less than or equal to 1"),
])
def test_bounds_read_as_a_person_writes_them(http, field, value, words):
    """main: top_p 0 was refused with "0.000000000000000000000000000000000000011754943508222875";
    no bound is shown with more than a few digits."""
    for route, body in (("/v1/completions", {"prompt": "a"}),
                        ("/v1/chat/completions", {"messages": MESSAGES})):
        message = refused(http, route, body | {"max_tokens": 1, field: value}, field)
        assert words in message and not re.search(r"\d{6}", message.replace(repr(value), ""))


def test_the_body_cap_is_sized_from_the_context():
    """A conversation of ~100 KB (past main's fixed 64 KiB) on a 2,048-token model is read
    (its length then judged: a 400 naming messages, not a 413); past 16 x 2,048 x 32 bytes a
    413 whose body names the limit; --max-body-bytes still rules where given."""
    assert LMLimits().body_cap(64) == 65_536 and LMLimits().body_cap(2048) == 1 << 20
    assert LMLimits(max_body_bytes=100).body_cap(2048) == 100
    long = [{"role": "user", "content": "to be or not "}] * 6000
    with client(2048) as c:
        r = c.post("/v1/chat/completions", json={"messages": long, "max_tokens": 1})
        assert r.status_code == 400 and r.json()["error"]["param"] == "messages", r.text
        over = c.post("/v1/completions", json={"prompt": "x" * (1 << 20)})
        assert over.status_code == 413
        assert "more than this server's --max-body-bytes 1048576" in \
            over.json()["error"]["message"]
    helped = subprocess.run([sys.executable, "-m", "decoderkit", "serve", "--help"],
                            capture_output=True, text=True, check=True,
                            env=os.environ | {"COLUMNS": "400"}).stdout
    assert "LM 16 bytes x the model's context x --max-inputs, at least 65536" in helped
