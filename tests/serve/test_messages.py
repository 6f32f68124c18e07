"""Refusals that name the field at fault, in both servers: a body that is not UTF-8, JSON sent
without its Content-Type, a character a character model lacks, a seed near the top with n > 1,
token ids past the context."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from decoderkit.nn.lm.model import DecoderOnlyLM, LMConfig
from decoderkit.serve.lm.app import create_lm_app
from decoderkit.serve.lm.engines import from_lm
from decoderkit.serve.seq2seq.app import create_app
from decoderkit.text.lm.tokenizer import LMTokenizer
from decoderkit.training.seq2seq.checkpoint import load_checkpoint
from serve.lm.lm_serving import tiny_lm
from serve.serving import varied_checkpoint

JSON = {"Content-Type": "application/json"}


@pytest.fixture(scope="module")
def lm():
    model, tokenizer = tiny_lm(context=64)
    with TestClient(create_lm_app(from_lm(model, tokenizer, "tiny"))) as client:
        yield client


@pytest.fixture(scope="module")
def translator(tmp_path_factory):
    ckpt = load_checkpoint(varied_checkpoint(tmp_path_factory.mktemp("m") / "ckpt"))
    with TestClient(create_app(ckpt)) as client:
        yield client


def lm_error(response, status=400) -> dict:
    assert response.status_code == status, response.text
    return response.json()["error"]


@pytest.mark.parametrize("path", ["/v1/completions", "/tokenize"])
def test_a_body_not_utf8_and_json_without_its_header_name_the_body_and_the_header(lm, path):
    latin1 = lm_error(lm.post(path, content='{"prompt": "café"}'.encode("latin-1"),
                              headers=JSON))
    assert latin1["param"] == "body" and "UTF-8" in latin1["message"]
    for headers in ({}, {"Content-Type": "text/plain"}):
        plain = lm_error(lm.post(path, content=b'{"prompt": "a"}', headers=headers))
        assert plain["param"] == "body" and "Content-Type: application/json" in plain["message"]


def test_the_translation_server_names_them_too(translator):
    latin1 = translator.post("/v1/translate", content='{"inputs": ["é"]}'.encode("latin-1"),
                             headers=JSON)
    assert latin1.status_code == 400 and latin1.json()["field"] == "body"
    assert "UTF-8" in latin1.json()["error"]
    plain = translator.post("/v1/translate", content=b'{"inputs": ["1"]}')
    assert plain.status_code == 422 and plain.json()["field"] == "body"
    assert "Content-Type: application/json" in plain.json()["error"]


def test_ids_past_the_context_name_the_context_not_the_prompt_count(lm):
    for prompt, param in ((list(range(65)), "prompt"), ([[1, 2], list(range(65))], "prompt[1]")):
        error = lm_error(lm.post("/v1/completions", json={"prompt": prompt}))
        assert error["param"] == param and "context of 64 tokens" in error["message"], error
    texts = lm_error(lm.post("/v1/completions", json={"prompt": ["a"] * 33}))
    assert texts["param"] == "prompt" and "32 items" in texts["message"]


def test_the_top_seed_with_n_draws_and_never_names_a_seed_not_sent(lm):
    body = {"prompt": "To be", "max_tokens": 3, "n": 3, "seed": 4294967295}
    first = lm.post("/v1/completions", json=body)
    assert first.status_code == 200, first.text
    assert first.json()["choices"] == lm.post("/v1/completions", json=body).json()["choices"]


def test_a_character_the_vocabulary_lacks_names_the_prompt():
    tokenizer = LMTokenizer.characters("abc ")
    model = DecoderOnlyLM(LMConfig(vocab_size=tokenizer.vocab_size, n_layers=1, d_model=8,
                                   n_heads=2, d_ff=16, max_len=16, dropout=0.0)).eval()
    with TestClient(create_lm_app(from_lm(model, tokenizer, "chars"))) as client:
        for path, body, param in (("/v1/completions", {"prompt": "abz"}, "prompt"),
                                  ("/v1/completions", {"prompt": ["ab", "xy"]}, "prompt[1]"),
                                  ("/tokenize", {"prompt": "z"}, "prompt"),
                                  ("/v1/explore", {"prompt": "az"}, "prompt")):
            error = lm_error(client.post(path, json=body))
            assert error["param"] == param and "character vocabulary" in error["message"], error
