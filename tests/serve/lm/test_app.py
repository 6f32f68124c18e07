"""The LM app over HTTP: its companions (/v1/models, /health, /tokenize, /detokenize,
/metrics), the token and body guards in OpenAI's error shape, 429 on a full queue, a streaming
client that leaves dropped at the next step, and ``decoderkit serve --checkpoint`` on an LM
directory giving ``lm sample --greedy``'s text."""

from __future__ import annotations

import json
from dataclasses import replace
import subprocess
import sys
import threading
import time

import httpx
import pytest

from decoderkit.generation.lm.complete import generate
from decoderkit.generation.lm.rows import Rows
from decoderkit.serve.lm.app import create_lm_app
from decoderkit.serve.lm.engines import from_lm
from decoderkit.serve.lm.limits import LMLimits
from decoderkit.training.lm.checkpoint import save_lm_checkpoint
from serve.lm.lm_serving import LiveServer, tiny_lm
from serve.serving import SRC, Server

TOKEN = "s3cret-token"


@pytest.fixture(scope="module")
def server():
    model, tokenizer = tiny_lm(context=256)
    app = create_lm_app(from_lm(model, tokenizer, "tiny"),
                        LMLimits(max_batch=2, max_queue=2, max_body_bytes=4096), TOKEN)
    with LiveServer(app) as live:
        yield live


def call(server, method: str, path: str, **kwargs) -> httpx.Response:
    headers = {"Authorization": f"Bearer {TOKEN}"} | kwargs.pop("headers", {})
    return httpx.request(method, server.url + path, headers=headers, timeout=60, **kwargs)


def test_companion_routes(server):
    models = call(server, "GET", "/v1/models").json()
    assert models["data"][0]["id"] == "tiny" and models["data"][0]["max_model_len"] == 256
    ids = call(server, "POST", "/tokenize", json={"prompt": "To be"}).json()
    assert ids["count"] == len(ids["tokens"]) > 0
    text = call(server, "POST", "/detokenize", json={"tokens": ids["tokens"]}).json()
    assert text == {"prompt": "To be"}
    assert httpx.get(server.url + "/health").json()["status"] == "ok"  # no token needed
    metrics = call(server, "GET", "/metrics").text
    for name in ("decoderkit_requests_running", "decoderkit_requests_waiting",
                 "decoderkit_generated_tokens_total"):
        assert f"\n{name} " in metrics


def test_explore_refuses_what_it_cannot_show(server):
    ok = call(server, "POST", "/v1/explore", json={"prompt": [1, 2, 3]}).json()
    assert len(ok["attention"]) == 2 and len(ok["attention"][0][0]) == 3
    for prompt in ([], [1, 99999], "word " * 80):
        r = call(server, "POST", "/v1/explore", json={"prompt": prompt})
        assert r.status_code == 400 and r.json()["error"]["param"].startswith("prompt"), r.text


def test_guards_answer_in_openais_shape(server):
    plain = httpx.post(server.url + "/v1/completions", json={"prompt": "a"})
    assert plain.status_code == 401 and plain.json()["error"]["code"] == "invalid_api_key"
    big = call(server, "POST", "/v1/completions", content=b"{" + b" " * 5000 + b"}",
               headers={"Content-Type": "application/json"})
    assert big.status_code == 413 and big.json()["error"]["param"] == "body"
    bad = call(server, "POST", "/v1/completions", content=b"{not json",
               headers={"Content-Type": "application/json"})
    assert bad.status_code == 400 and set(bad.json()["error"]) == {"message", "type", "param",
                                                                   "code"}


def wait_for(server, key: str, value: int, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while httpx.get(server.url + "/health").json()[key] != value:
        assert time.monotonic() < deadline, f"/health {key} never reached {value}"
        time.sleep(0.05)


@pytest.fixture
def gate(monkeypatch):
    """The worker steps only while the returned Event is set (the test holds it between)."""
    opened = threading.Event()
    step = Rows.step

    def gated(self, *args):
        opened.wait()
        return step(self, *args)

    monkeypatch.setattr(Rows, "step", gated)
    yield opened
    opened.set()


def stream(server, body: dict):
    """An open streaming request and its lines."""
    s = httpx.stream("POST", server.url + "/v1/completions", json=body, timeout=60,
                     headers={"Authorization": f"Bearer {TOKEN}"})
    return s, s.__enter__().iter_lines()


def test_a_full_queue_is_429_and_clients_that_leave_are_dropped_at_the_next_step(server, gate):
    long = {"prompt": ["The", "To"], "max_tokens": 200, "stream": True, "echo": True}
    running, lines = stream(server, long)  # two rows run (max_batch 2)
    assert next(lines).startswith("data: ")  # an echoed prompt: joined and prefilled
    wait_for(server, "rows_running", 2)
    waiting = [stream(server, long | {"prompt": "A"}) for _ in range(2)]  # max_queue 2
    wait_for(server, "rows_waiting", 2)
    full = call(server, "POST", "/v1/completions", json=long | {"stream": False})
    assert full.status_code == 429 and full.json()["error"]["type"] == "rate_limit_error"
    before = httpx.get(server.url + "/health").json()
    for s, _ in [(running, lines), *waiting]:  # every client leaves
        s.__exit__(None, None, None)
    worker = server.app.state.worker
    deadline = time.monotonic() + 60
    while not all(job.cancelled for job in [*worker._jobs, *worker._waiting]):
        assert time.monotonic() < deadline, "the server never saw the clients leave"
        time.sleep(0.05)
    gate.set()  # the step in flight ends; the rows leave before the next one
    wait_for(server, "rows_running", 0)
    after = httpx.get(server.url + "/health").json()
    assert after["dropped"] == before["dropped"] + 3 and after["rows_waiting"] == 0
    assert after["steps"] <= before["steps"] + 1


def test_serve_command_on_an_lm_directory_gives_lm_samples_greedy_text(tmp_path):
    model, tokenizer = tiny_lm(context=64)
    directory = save_lm_checkpoint(tmp_path / "run", model, tokenizer, step=3)
    prompt = "All that"
    sample = subprocess.run(
        [sys.executable, "-m", "decoderkit", "lm", "sample", "--checkpoint", str(directory),
         "--prompt", prompt, "--greedy", "--max-new-tokens", "20", "--threads", "1"],
        capture_output=True, text=True, env={"PYTHONPATH": SRC}, check=True).stdout
    server = Server(directory, "--token", TOKEN)
    try:
        out = call(server, "POST", "/v1/completions",
                   json={"model": "run", "prompt": prompt, "max_tokens": 20, "temperature": 0})
        assert out.status_code == 200, out.text
        assert prompt + out.json()["choices"][0]["text"] + "\n" == sample
        for flags, message in ((["--max-beam", "4"], "--max-beam applies to translation"),
                               (["--engine", "ctranslate2"], "ctranslate2 without --model"),
                               (["--autotune"], "--autotune needs --compile"),
                               (["--engine", "ctranslate2", "--model", str(directory),
                                 "--compile"], "--compile with --engine ctranslate2")):
            refused = subprocess.run(
                [sys.executable, "-m", "decoderkit", "serve", "--checkpoint", str(directory),
                 "--port", "1", *flags], capture_output=True, text=True,
                env={"PYTHONPATH": SRC})
            assert refused.returncode == 2 and message in refused.stderr, refused.stderr
    finally:
        assert server.stop() == 0
    assert json.loads((directory / "meta.json").read_text())["step"] == 3  # untouched


def test_serve_command_on_a_llama_directory_gives_lm_samples_greedy_text(tmp_path):
    """A Hugging Face Llama-family directory (tiny, random, built by transformers) served:
    its completions are lm sample's greedy text."""
    pytest.importorskip("transformers")
    from decoderkit.text.lm.tokenizer import LMTokenizer
    from interop.llama_helpers import save_hf

    tokenizer = LMTokenizer.characters("to be, or not to be: that is the question")
    save_hf("qwen3", tmp_path, vocab_size=tokenizer.vocab_size)
    tokenizer.save(tmp_path / "tokenizer.json")
    sample = subprocess.run(
        [sys.executable, "-m", "decoderkit", "lm", "sample", "--checkpoint", str(tmp_path),
         "--prompt", "to be", "--greedy", "--max-new-tokens", "12", "--threads", "1"],
        capture_output=True, text=True, env={"PYTHONPATH": SRC}, check=True).stdout
    server = Server(tmp_path, "--token", TOKEN)
    try:
        out = call(server, "POST", "/v1/completions",
                   json={"prompt": "to be", "max_tokens": 12, "temperature": 0})
        assert out.status_code == 200, out.text
        assert "to be" + out.json()["choices"][0]["text"] + "\n" == sample
    finally:
        assert server.stop() == 0


def test_the_int8_engine_serves_what_generate_gives_on_its_copy():
    from decoderkit.generation.int8 import int8_available

    if not int8_available():
        pytest.skip("no fbgemm int8 engine")
    model, tokenizer = tiny_lm()
    served = from_lm(model, tokenizer, "tiny8", int8=True)
    ids = tokenizer.encode("To be")
    want = generate(served.model, [ids], max_new_tokens=10, greedy=True,
                    eos_id=tokenizer.eos_id)[0]
    with LiveServer(create_lm_app(served)) as live:
        out = httpx.post(live.url + "/v1/completions", timeout=60, json={
            "prompt": ids, "max_tokens": 10, "temperature": 0}).json()
        models = httpx.get(live.url + "/v1/models").json()
    assert models["data"][0]["engine"] == "decoderkit int8"
    assert out["choices"][0]["text"] == tokenizer.decode(
        [t for t in want if t != tokenizer.eos_id])


def test_a_row_stops_at_every_end_id_of_the_directory():
    from decoderkit.generation.lm.defaults import GenerationDefaults

    model, tokenizer = tiny_lm()
    ids = tokenizer.encode("To be")
    free = generate(model, [ids], max_new_tokens=10, greedy=True)[0]
    end = max(set(free), key=free.index)  # the token that comes first latest
    unused = next(i for i in range(tokenizer.vocab_size) if i not in free)
    served = replace(from_lm(model, tokenizer, "tiny"), generation=GenerationDefaults(
        "generation_config.json", (unused, end)))
    assert served.eos_ids == {unused, end, tokenizer.eos_id}
    with LiveServer(create_lm_app(served)) as live:
        out = httpx.post(live.url + "/v1/completions", timeout=60, json={
            "prompt": ids, "max_tokens": 10, "temperature": 0}).json()
    assert out["choices"][0]["finish_reason"] == "stop"
    assert out["choices"][0]["text"] == tokenizer.decode(free[:free.index(end)])


def test_a_request_that_sets_no_sampling_field_gets_the_directorys():
    from decoderkit.generation.lm.defaults import GenerationDefaults

    model, tokenizer = tiny_lm()
    ids = tokenizer.encode("To be")
    served = replace(from_lm(model, tokenizer, "tiny"), generation=GenerationDefaults(
        "generation_config.json", greedy=True, temperature=0.5, top_k=7))
    assert served.notes == ("greedy on (do_sample false) (from generation_config.json)",)
    greedy = generate(model, [ids], max_new_tokens=8, greedy=True)[0]
    drawn = generate(model, [ids], max_new_tokens=8, temperature=1.3, top_k=7, seed=4)[0]
    with LiveServer(create_lm_app(served)) as live:
        def text(**fields):
            body = {"prompt": ids, "max_tokens": 8} | fields
            return httpx.post(live.url + "/v1/completions", timeout=60,
                              json=body).json()["choices"][0]["text"]

        assert text() == tokenizer.decode([t for t in greedy if t != tokenizer.eos_id])
        assert text(temperature=1.3, seed=4) == tokenizer.decode(  # sampling: its top_k
            [t for t in drawn if t != tokenizer.eos_id])


def test_a_padded_vocabulary_serves_only_the_tokenizers_ids(tmp_path):
    """A directory of more rows than tokens, its head rigged so a padded row wins every
    argmax: greedy text is generate's over the tokenizer's ids, draws and log-probs list none
    past it, an id past it in a prompt is a 400 naming the prompt, the explorer shows none."""
    pytest.importorskip("transformers")
    from decoderkit.interop.checkpoints import load_checkpoint
    from interop.llama_helpers import save_padded

    tokenizer = save_padded(tmp_path)
    ckpt = load_checkpoint(tmp_path)
    served, n, ids = from_lm(ckpt.model, tokenizer, "padded"), ckpt.vocab, tokenizer.encode("to be")
    assert served.vocab == n < ckpt.config.vocab_size
    want = generate(served.model, [ids], max_new_tokens=10, greedy=True, vocab=n)[0]
    with LiveServer(create_lm_app(served)) as live:
        def complete(**body):
            return httpx.post(live.url + "/v1/completions", timeout=60,
                              json={"prompt": ids, "max_tokens": 10} | body)
        greedy = complete(temperature=0, logprobs=5, echo=True)
        drawn = complete(temperature=1.5, n=4, seed=2, logprobs=3)
        padded = complete(prompt=[1, n])
        shown = httpx.post(live.url + "/v1/explore", timeout=60, json={"prompt": ids})
    assert greedy.status_code == drawn.status_code == shown.status_code == 200, greedy.text
    choice = greedy.json()["choices"][0]
    assert choice["text"] == "to be" + tokenizer.decode(want)
    vocabulary = set(tokenizer.hf.get_vocab())
    for c in [choice, *drawn.json()["choices"]]:
        for top in c["logprobs"]["top_logprobs"][1:]:
            assert set(top) <= vocabulary and len(top) >= 3
    assert len({c["text"] for c in drawn.json()["choices"]}) > 1
    assert padded.status_code == 400 and padded.json()["error"]["param"] == "prompt[1]"
    assert len(shown.json()["logits"]) == n and all(t["id"] < n for t in shown.json()["top"])
