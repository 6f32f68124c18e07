"""The HTTP API through FastAPI's test client: results against the library's own calls made
alone, every refusal as JSON naming the field, the body cap, the token."""

from __future__ import annotations

import math

import pytest
import torch
from fastapi.testclient import TestClient
from pydantic import ValidationError

from decoderkit.generation.seq2seq.search import beam_search
from decoderkit.generation.seq2seq.translate import DecodeOptions, translate_lines
from decoderkit.report.params import count_parameters
from decoderkit.serve.seq2seq.app import create_app
from decoderkit.serve.seq2seq.limits import ServeLimits
from decoderkit.serve.seq2seq.schema import request_model
from decoderkit.training.seq2seq.checkpoint import load_checkpoint
from serve.serving import varied_checkpoint

LINES = ["29 nov 2026", "3", "", "mar 14 1999, a long one"]
LIMITS = ServeLimits(max_body_bytes=4096, max_inputs=4, max_chars=40, max_len=60, max_beam=4,
                     max_explain=3)


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return load_checkpoint(varied_checkpoint(tmp_path_factory.mktemp("app") / "ckpt"))


@pytest.fixture(scope="module")
def client(ckpt):
    with TestClient(create_app(ckpt, LIMITS)) as c:
        yield c


def assert_close(got, want, path="result"):
    """Equal structures; floats to 1e-5 relative (a batch may round differently)."""
    if isinstance(want, float):
        assert math.isclose(got, want, rel_tol=1e-5, abs_tol=1e-6), (path, got, want)
    elif isinstance(want, dict):
        assert set(got) >= set(want), (path, set(want) - set(got))
        for k in want:
            assert_close(got[k], want[k], f"{path}.{k}")
    elif isinstance(want, list):
        assert len(got) == len(want), (path, len(got), len(want))
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            assert_close(g, w, f"{path}[{i}]")
    else:
        assert got == want, (path, got, want)


@pytest.mark.parametrize("body,options", [
    ({}, DecodeOptions()),
    ({"beam": 3, "n_best": 2}, DecodeOptions(beam=3, n_best=2)),
    ({"explain": 2}, DecodeOptions(explain=2)),
    ({"max_len": 7}, DecodeOptions(max_len=7)),
    ({"sampling": {"seed": 5, "top_k": 4}}, DecodeOptions(sample=True, seed=5, top_k=4)),
])
def test_each_result_is_the_library_translating_that_line_alone(client, ckpt, body, options):
    r = client.post("/v1/translate", json={"inputs": LINES, **body})
    assert r.status_code == 200, r.text
    results = r.json()["results"]
    assert [x["source"] for x in results] == LINES
    for line, got in zip(LINES, results, strict=True):
        assert_close(got, translate_lines(ckpt, [line], options)[0].to_dict())


def test_n_best_is_beam_search_n_best(client, ckpt):
    line = "12 jan 2020"
    r = client.post("/v1/translate", json={"inputs": [line], "beam": 4, "n_best": 3,
                                           "max_len": 30})
    got = r.json()["results"][0]["nbest"]
    src = torch.tensor([ckpt.src_tokenizer.encode(line)])
    out = beam_search(ckpt.model, src, None, beam_size=4, n_best=3, max_len=30)
    eos = ckpt.config.eos_id
    for hyp, ids, score in zip(got, out.nbest_tokens[0].tolist(), out.nbest_scores[0].tolist(),
                               strict=True):
        ids = ids[:ids.index(eos) + 1] if eos in ids else ids
        assert hyp["tokens"] == ckpt.tgt_tokenizer.tokens(ids)
        assert hyp["text"] == ckpt.tgt_tokenizer.decode(ids)
        assert hyp["score"] == pytest.approx(score, rel=1e-5)
    assert got[0]["score"] == pytest.approx(r.json()["results"][0]["score"], rel=1e-6)


def test_explain_gives_a_step_per_token_with_every_layer_and_head(client, ckpt):
    r = client.post("/v1/translate", json={"inputs": ["1 feb 2003"], "explain": 3})
    result = r.json()["results"][0]
    c, S = ckpt.config, len(result["source_tokens"])
    assert len(result["steps"]) == len(result["tokens"]) > 0
    for i, step in enumerate(result["steps"]):
        assert step["token"] == result["tokens"][i]
        assert len(step["alternatives"]) == 3
        for weights, width in ((step["cross_attention"], S), (step["self_attention"], i + 1)):
            assert len(weights) == c.n_layers and all(len(w) == c.n_heads for w in weights)
            for head in (h for layer in weights for h in layer):
                assert len(head) == width and sum(head) == pytest.approx(1.0, abs=1e-5)


def test_model_info(client, ckpt):
    info = client.get("/v1/model").json()
    assert info["config"] == ckpt.config.to_dict()
    assert info["parameters"] == count_parameters(ckpt.model)
    assert info["parameters"] == sum(p.numel() for p in ckpt.model.parameters())
    assert info["src_vocab_size"] == ckpt.src_tokenizer.vocab_size
    assert info["tgt_vocab_size"] == ckpt.tgt_tokenizer.vocab_size
    assert info["limits"]["max_len"] == 60 and info["step"] == 7


@pytest.mark.parametrize("body,field", [
    ({}, "inputs"),
    ({"inputs": []}, "inputs"),
    ({"inputs": "29 nov"}, "inputs"),
    ({"inputs": ["a"] * 5}, "inputs"),
    ({"inputs": ["x" * 41]}, "inputs[0]"),
    ({"inputs": ["ok", 3]}, "inputs[1]"),
    ({"inputs": ["a"], "beam": "4"}, "beam"),
    ({"inputs": ["a"], "beam": 0}, "beam"),
    ({"inputs": ["a"], "beam": 5}, "beam"),
    ({"inputs": ["a"], "beam": 2.5}, "beam"),
    ({"inputs": ["a"], "beam": True}, "beam"),
    ({"inputs": ["a"], "beam": 2, "n_best": 3}, "n_best"),
    ({"inputs": ["a"], "max_len": 61}, "max_len"),
    ({"inputs": ["a"], "max_len": -1}, "max_len"),
    ({"inputs": ["a"], "explain": 4}, "explain"),
    ({"inputs": ["a"], "length_penalty": -1}, "length_penalty"),
    ({"inputs": ["a"], "sampling": {"temperature": 0}}, "sampling.temperature"),
    ({"inputs": ["a"], "sampling": {"top_p": 1.5}}, "sampling.top_p"),
    ({"inputs": ["a"], "sampling": {"top_k": -1}}, "sampling.top_k"),
    ({"inputs": ["a"], "sampling": {"seed": "x"}}, "sampling.seed"),
    ({"inputs": ["a"], "sampling": {"seed": -1}}, "sampling.seed"),
    ({"inputs": ["a"], "sampling": {"typo": 1}}, "sampling.typo"),
    ({"inputs": ["a"], "beam": 2, "sampling": {}}, "sampling"),
    ({"inputs": ["a"], "beams": 2}, "beams"),
    ([1, 2], "body"),
])
def test_bad_requests_get_422_naming_the_field(client, body, field):
    r = client.post("/v1/translate", json=body)
    assert r.status_code == 422, r.text
    assert r.json()["field"] == field
    assert r.json()["error"].startswith(field + ": ")


@pytest.mark.parametrize("raw", [b"{bad json", b'{"inputs": ["a"], "beam": NaN}',
                                 b'{"inputs": ["a"], "length_penalty": Infinity}', b""])
def test_malformed_json_gets_422_json(client, raw):
    r = client.post("/v1/translate", content=raw, headers={"Content-Type": "application/json"})
    assert r.status_code == 422, r.text
    assert r.json()["field"] in ("body", "beam", "length_penalty")


def test_oversize_bodies_get_413_declared_or_streamed(client):
    big = b'{"inputs": ["' + b"1" * 5000 + b'"]}'
    r = client.post("/v1/translate", content=big, headers={"Content-Type": "application/json"})
    assert r.status_code == 413 and r.json()["field"] == "body"

    def chunks():  # no Content-Length: counted as it streams
        yield big[:3000]
        yield big[3000:]

    r = client.post("/v1/translate", content=chunks(),
                    headers={"Content-Type": "application/json"})
    assert r.status_code == 413 and r.json()["field"] == "body"
    assert client.post("/v1/translate", json={"inputs": ["1"]}).status_code == 200


def test_a_bad_request_leaves_the_server_serving(client, ckpt):
    for body in ({"inputs": [None]}, {"inputs": ["a"], "beam": 10**30}, {"inputs": ["\x00"]}):
        assert client.post("/v1/translate", json=body).status_code in (200, 422)
    r = client.post("/v1/translate", json={"inputs": ["7 may 2001"]})
    assert r.json()["results"][0]["text"] == translate_lines(ckpt, ["7 may 2001"],
                                                             DecodeOptions())[0].text


def test_token_guards_every_api_route_but_health(ckpt):
    with TestClient(create_app(ckpt, LIMITS, token="s3cret")) as c:
        assert c.get("/health").status_code == 200
        for method, path in (("GET", "/v1/model"), ("POST", "/v1/translate")):
            for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret"}):
                r = c.request(method, path, headers=headers, json={"inputs": ["1"]})
                assert r.status_code == 401 and r.json()["field"] == "authorization"
                assert r.headers["WWW-Authenticate"] == "Bearer"
        ok = {"Authorization": "Bearer s3cret"}
        assert c.get("/v1/model", headers=ok).status_code == 200
        assert c.post("/v1/translate", json={"inputs": ["1"]}, headers=ok).status_code == 200
        assert c.get("/").status_code == 200  # the page holds no data; it asks for the token


def test_the_explorer_page_and_its_files_are_served(client):
    page = client.get("/")
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    for name in ("explorer.js", "explorer.css"):
        assert f"/static/{name}" in page.text
        assert client.get(f"/static/{name}").status_code == 200
    assert "http" not in client.get("/static/explorer.js").text.replace("HTTP API", "")
    assert client.get("/openapi.json").json()["paths"]["/v1/translate"]["post"]


def test_a_line_too_long_for_the_model_is_an_error_result_beside_good_ones(ckpt):
    long = "1" * (ckpt.config.max_len + 1)
    with TestClient(create_app(ckpt, ServeLimits(max_chars=200))) as c:
        r = c.post("/v1/translate", json={"inputs": ["12", long, "3"]})
    assert r.status_code == 200
    good, bad, other = r.json()["results"]
    assert "more than the model's max_len 96" in bad["error"] and bad["text"] == ""
    assert good["error"] is None and other["error"] is None
    assert good["text"] == translate_lines(ckpt, ["12"], DecodeOptions())[0].text


@pytest.mark.parametrize("sampling,field,limit", [
    ({"temperature": 1e-308}, "sampling.temperature", "at least 1.18e-38, the smallest normal"),
    ({"temperature": 1e-40}, "sampling.temperature", "at least 1.18e-38"),
    ({"top_p": 1e-300}, "sampling.top_p", "at least 1.18e-38"),
    ({"top_p": 0}, "sampling.top_p", "greater than 0"),
    ({"seed": 2 ** 32}, "sampling.seed", "less than or equal to 4294967295"),
    ({"seed": 2 ** 62}, "sampling.seed", "less than or equal to 4294967295"),
])
def test_sampling_values_the_model_cannot_use_get_422_naming_field_and_limit(
        client, sampling, field, limit):
    """In range for the schema's plain bounds, but 0 in the model's float32 or beyond the
    generators' seeds: a 422 naming the field and the real limit, never a 500."""
    r = client.post("/v1/translate", json={"inputs": LINES, "sampling": sampling})
    assert r.status_code == 422, r.text
    assert r.json()["field"] == field
    assert limit in r.json()["error"] and repr(next(iter(sampling.values()))) in r.json()["error"]


def test_the_smallest_sampling_values_and_the_largest_seed_are_served(client, ckpt):
    """At the limits themselves: the library's own results for each line alone."""
    tiny = torch.finfo(torch.float32).tiny
    sampling = {"temperature": tiny, "top_p": tiny, "seed": 2 ** 32 - 1}
    r = client.post("/v1/translate", json={"inputs": LINES, "sampling": sampling})
    assert r.status_code == 200, r.text
    options = DecodeOptions(sample=True, temperature=tiny, top_p=tiny, seed=2 ** 32 - 1)
    for line, got in zip(LINES, r.json()["results"], strict=True):
        assert_close(got, translate_lines(ckpt, [line], options)[0].to_dict())


def test_a_float64_models_schema_takes_what_float32_refuses():
    """The schema's bounds are the model dtype's (``generation.limits``)."""
    wide, narrow = request_model(LIMITS, torch.float64), request_model(LIMITS, torch.float32)
    body = {"inputs": ["a"], "sampling": {"temperature": 1e-300, "top_p": 1e-300}}
    assert wide.model_validate(body).sampling.temperature == 1e-300
    with pytest.raises(ValidationError, match="1.18e-38"):
        narrow.model_validate(body)
    with pytest.raises(ValidationError, match="2.23e-308"):
        wide.model_validate({"inputs": ["a"], "sampling": {"temperature": 1e-320}})


def test_a_directory_decodes_alike_in_translate_and_the_server(tmp_path, capsys):
    """A Hugging Face Marian directory whose generation_config.json says num_beams 4: the
    server's request that leaves beam out decodes as ``translate`` without --beam (beam 4,
    which differs from greedy here), a request's beam 1 as --beam 1, and a sampled request
    is one row (the directory's beam yields to it), as ``translate --sample``."""
    import json

    from decoderkit.cli import main
    from decoderkit.interop.checkpoints import load_checkpoint as open_checkpoint
    from interop.marian_helpers import sources, write_marian

    directory = write_marian(tmp_path / "opus", seed=12, eos_bias=1.5)
    file = directory / "generation_config.json"
    file.write_text(json.dumps(json.loads(file.read_text()) | {"num_beams": 4}))
    lines = sources(8, seed=26)
    outputs = {}
    for flags in ((), ("--beam", "1"), ("--sample", "--seed", "3")):
        assert main(["translate", "--checkpoint", str(directory), *flags, *lines]) == 0
        outputs[flags] = capsys.readouterr().out.splitlines()
    assert outputs[()] != outputs[("--beam", "1")]  # beam 4 and greedy differ on these lines
    with TestClient(create_app(open_checkpoint(directory))) as client:
        for flags, body in (((), {}), (("--beam", "1"), {"beam": 1}),
                            (("--sample", "--seed", "3"), {"sampling": {"seed": 3}})):
            reply = client.post("/v1/translate", json={"inputs": lines, **body})
            assert reply.status_code == 200, reply.text
            assert [r["text"] for r in reply.json()["results"]] == outputs[flags], body
