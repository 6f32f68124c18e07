"""The CTranslate2 engine behind the same API: a tiny LM exported (lm export's
export_transformers), converted by CTranslate2's own converter, served; greedy text as ours
where our margins decide, streams that concatenate, and what it cannot give refused by name."""

from __future__ import annotations

import json

import httpx
import pytest
import torch

from conftest import assert_tokens_agree_where_decided
from decoderkit.generation.lm.complete import generate
from decoderkit.nn.rowwise import rowwise
from decoderkit.interop.gpt.hf import export_transformers
from decoderkit.serve.lm.app import create_lm_app
from decoderkit.serve.lm.engines import from_ctranslate2
from serve.lm.lm_serving import LiveServer, tiny_lm

converters = pytest.importorskip("ctranslate2.converters")


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ct2")
    model, tokenizer = tiny_lm()
    export_transformers(model, tokenizer, tmp / "export")
    converters.TransformersConverter(str(tmp / "export")).convert(str(tmp / "ct2"))
    return model, tokenizer, from_ctranslate2(tmp / "ct2", model, tokenizer, "tiny-ct2", 1)


@pytest.fixture(scope="module")
def url(served):
    with LiveServer(create_lm_app(served[2])) as server:
        yield server.url


def complete(url: str, **body) -> httpx.Response:
    return httpx.post(url + "/v1/completions", json={"max_tokens": 12} | body, timeout=120)


def test_greedy_equals_ours_where_decided_and_streams_concatenate(url, served):
    model, tokenizer, _ = served
    prompts = ["To be, or", "The quick", "All that"]
    ours, margins = [], []
    for p in prompts:
        ids = tokenizer.encode(p)
        ours += generate(rowwise(model), [ids], max_new_tokens=12, greedy=True,
                         eos_id=tokenizer.eos_id)
        with torch.inference_mode():  # our margins along our own greedy path
            seq, m = list(ids), []
            for t in ours[-1]:
                top = model(torch.tensor([seq]))[0, -1].log_softmax(-1).topk(2).values
                m.append(float(top[0] - top[1]))
                seq.append(t)
            margins.append(m)
    got = [tokenizer.encode(complete(url, prompt=p, temperature=0).json()["choices"][0]["text"])
           for p in prompts]
    want = [[t for t in o if t != tokenizer.eos_id] for o in ours]
    assert_tokens_agree_where_decided([tokenizer.encode(tokenizer.decode(w)) for w in want],
                                      got, margins, 1e-4, at_least=1)
    with httpx.stream("POST", url + "/v1/completions", timeout=120, json={
            "prompt": "The quick", "max_tokens": 12, "temperature": 0, "stream": True}) as r:
        pieces = [line for line in r.iter_lines() if line.startswith("data: {")]
    text = "".join(json.loads(p[6:])["choices"][0]["text"] for p in pieces)
    assert text == complete(url, prompt="The quick", temperature=0).json()["choices"][0]["text"]


@pytest.mark.parametrize("field, value", [("seed", 3), ("logit_bias", {"5": 1.0}),
                                          ("presence_penalty", 0.5), ("logprobs", 1)])
def test_what_ctranslate2_cannot_give_is_a_400_naming_the_engine(url, field, value):
    r = complete(url, prompt="The", **{field: value})
    assert r.status_code == 400
    error = r.json()["error"]
    assert error["param"] == field and "engine ctranslate2" in error["message"]


def test_the_explorer_is_refused_by_name(url):
    r = httpx.post(url + "/v1/explore", json={"prompt": "The"}, timeout=60)
    assert r.status_code == 400 and "engine ctranslate2" in r.json()["error"]["message"]


def test_a_conversion_without_an_end_of_text_token_is_refused_naming_it(tmp_path):
    """A tokenizer with no <|endoftext|> (a BPE trained by lm train) names no EOS; the
    export invents none, and CTranslate2's Generator cannot load such a conversion."""
    from decoderkit.base.errors import UsageError
    from decoderkit.interop.lm.ctranslate2 import open_generator
    from decoderkit.nn.lm.model import DecoderOnlyLM, LMConfig
    from decoderkit.text.lm.tokenizer import LMTokenizer

    tokenizer = LMTokenizer.train_bpe(["the cat sat on the mat"] * 5, 270)
    model = DecoderOnlyLM(LMConfig(vocab_size=tokenizer.vocab_size, n_layers=1, d_model=16,
                                   n_heads=2, d_ff=32, max_len=32)).eval()
    export_transformers(model, tokenizer, tmp_path / "export")
    converters.TransformersConverter(str(tmp_path / "export")).convert(str(tmp_path / "ct2"))
    with pytest.raises(UsageError, match="config.json: eos_token is null: the converted "):
        open_generator(tmp_path / "ct2", model.config.vocab_size)
