"""LoRA adapters served beside the base (``serve --adapter NAME=DIR``): /v1/models lists the
base and each adapter; a request's ``model`` picks one (Completions and Chat Completions, the
official ``openai`` client); rows of the base and of two adapters sent at once equal each
served alone bit for bit (text and log-probs); an unknown model is a 404 naming the served
ones; an adapter of another base, or flags that cannot serve adapters, refused at start in one
line; ``--adapter DIR`` alone serves the merged model."""

from __future__ import annotations

import copy
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import httpx
import pytest

from decoderkit.base.errors import UsageError
from decoderkit.cli import main
from decoderkit.generation.lm.complete import generate
from decoderkit.interop.lm.peft import merge_adapter, write_adapter_files
from decoderkit.nn.lm.lora import add_lora
from decoderkit.nn.lora import LoRAConfig
from decoderkit.serve.lm.adapters import split_adapter
from decoderkit.serve.lm.app import create_lm_app
from decoderkit.serve.lm.engines import from_lm
from decoderkit.serve.lm.limits import LMLimits
from decoderkit.training.lm.checkpoint import save_lm_checkpoint
from generation.lm.lora_helpers import randomise
from serve.lm.lm_serving import LiveServer, tiny_lm
from serve.serving import Server, free_port

openai = pytest.importorskip("openai")
NAME = "tiny"
LORAS = {"a": LoRAConfig(r=4, alpha=8.0), "b": LoRAConfig(r=2, targets=("all-linear",))}
LIMITS = LMLimits(max_batch=16, max_queue=64, max_work_tokens=4096)
PROMPTS = ["To be, or not", "A stitch in", "The quick brown"]


def save_adapters(root, model) -> dict[str, object]:
    """``LORAS`` with random B on copies of ``model``, each in PEFT's files under ``root``."""
    dirs = {}
    for k, (name, lora) in enumerate(LORAS.items()):
        tuned = copy.deepcopy(model)
        add_lora(tuned, lora)
        randomise(tuned, k + 1, std=1.0)
        dirs[name] = root / name
        dirs[name].mkdir()
        write_adapter_files(dirs[name], tuned, lora, None)
    return dirs


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    root = tmp_path_factory.mktemp("adapters")
    model, tokenizer = tiny_lm()
    return model, tokenizer, save_adapters(root, model), root


def serving(base, names):
    model, tokenizer, dirs, _ = base
    return from_lm(copy.deepcopy(model), tokenizer, NAME, adapters={n: dirs[n] for n in names})


def client_of(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0,
                         timeout=120)


def ask(client, model, i):
    """Request i of ``model``: greedy or seeded draws, with log-probs."""
    kwargs = dict(temperature=0) if i % 2 else dict(temperature=0.9, seed=5 + i)
    out = client.completions.create(model=model, prompt=PROMPTS[i % 3], max_tokens=12,
                                    logprobs=2, **kwargs)
    (choice,) = out.choices
    return out.model, choice.text, choice.logprobs.token_logprobs, choice.logprobs.top_logprobs


def test_the_base_and_two_adapters_at_once_equal_each_served_alone(base):
    asked = [(m, i) for i in range(4) for m in (NAME, "a", "b")]
    with LiveServer(create_lm_app(serving(base, ["a", "b"]), LIMITS)) as live:
        client = client_of(live)
        with ThreadPoolExecutor(len(asked)) as pool:
            together = list(pool.map(lambda mi: ask(client, *mi), asked))
        listed = httpx.get(live.url + "/v1/models").json()["data"]
    assert [(m["id"], m.get("parent")) for m in listed] == [(NAME, None), ("a", NAME),
                                                            ("b", NAME)]
    assert 0 < listed[1]["parameters"] < listed[0]["parameters"]
    alone = {}
    for names in ([], ["a"], ["b"]):
        with LiveServer(create_lm_app(serving(base, names), LIMITS)) as live:
            model = names[0] if names else NAME
            alone |= {(model, i): ask(client_of(live), model, i) for i in range(4)}
    assert together == [alone[mi] for mi in asked]
    assert [r[0] for r in together] == [m for m, _ in asked]  # each answered as its model
    greedy = {m: alone[(m, 1)][1] for m in (NAME, "a", "b")}
    assert len(set(greedy.values())) == 3, greedy  # each adapter continues otherwise


def test_an_adapter_row_is_the_merged_models_greedy_text(base):
    """The reference: ``--adapter DIR`` alone's model, the adapter merged into the base."""
    model, tokenizer, dirs, _ = base
    merged = merge_adapter(dirs["a"], copy.deepcopy(model))
    ids = tokenizer.encode(PROMPTS[0])
    want = generate(merged, [ids], max_new_tokens=12, greedy=True, eos_id=tokenizer.eos_id)[0]
    with LiveServer(create_lm_app(serving(base, ["a", "b"]), LIMITS)) as live:
        got = ask(client_of(live), "a", 3)
    assert got[1] == tokenizer.decode([t for t in want if t != tokenizer.eos_id])


def test_an_unknown_model_is_a_404_naming_the_served_ones(base):
    with LiveServer(create_lm_app(serving(base, ["a", "b"]), LIMITS)) as live:
        with pytest.raises(openai.NotFoundError) as err:
            client_of(live).completions.create(model="c", prompt="To be", max_tokens=2)
        body = httpx.post(live.url + "/v1/chat/completions", json={
            "model": "c", "messages": [{"role": "user", "content": "hi"}]}).json()
        explore = httpx.post(live.url + "/v1/explore", json={"model": "a", "prompt": "To"})
        tokens = httpx.post(live.url + "/tokenize", json={"model": "b", "prompt": "To be"})
    assert err.value.status_code == 404
    assert body["error"] == {"message": "model: this server serves 'tiny', 'a', 'b', not 'c' "
                             "(GET /v1/models)", "type": "not_found_error", "param": "model",
                             "code": "model_not_found"}
    assert explore.status_code == 400 and "the explorer shows the base model" in explore.text
    assert tokens.status_code == 200


def test_chat_completions_pick_the_adapter_by_model(tmp_path):
    """A chat directory's model (its template) with an adapter: the reply of model "a" is
    the one the adapter served alone gives, and the base's otherwise."""
    pytest.importorskip("transformers")
    from decoderkit.interop.checkpoints import load_checkpoint
    from text.lm.chat_dirs import chat_directory

    directory = chat_directory(tmp_path / "chatml", "chatml")
    ckpt = load_checkpoint(directory)
    dirs = save_adapters(tmp_path, ckpt.model)
    chat = [{"role": "user", "content": "To be, or not to be?"}]

    def reply(names, model):
        served = replace(from_lm(copy.deepcopy(ckpt.model), ckpt.tokenizer, "chatml",
                                 adapters={n: dirs[n] for n in names}), chat=ckpt.chat)
        with LiveServer(create_lm_app(served, LIMITS)) as live:
            out = client_of(live).chat.completions.create(model=model, messages=chat,
                                                          max_tokens=8, temperature=0)
        return out.model, out.choices[0].message.content

    both = reply(["a", "b"], "a")
    assert both == reply(["a"], "a") and both[0] == "a"
    assert both[1] != reply(["a", "b"], "chatml")[1]


def test_adapter_flags_are_split_and_checked():
    assert split_adapter("sql-lora=/runs/x") == ("sql-lora", "/runs/x")
    assert split_adapter("/runs/a=b") == (None, "/runs/a=b")  # a path holding '='
    assert split_adapter("runs/x") == (None, "runs/x")
    with pytest.raises(UsageError, match="needs the directory"):
        split_adapter("a=")


def test_an_adapter_of_another_base_and_flags_that_cannot_serve_adapters_are_refused(
        base, tmp_path, capsys):
    model, tokenizer, dirs, root = base
    run = save_lm_checkpoint(tmp_path / "run", model, tokenizer, step=1)
    wide = tiny_lm(context=64)[0]
    other = save_adapters(tmp_path, type(wide)(replace(wide.config, d_model=48, n_heads=4)))
    cases = [
        (["--adapter", f"a={dirs['a']}", "--adapter", f"wide={other['a']}"],
         f"--adapter wide={other['a']}: ", "has shape (4, 48), but r=4 on this model's "
         "linear needs (4, 32)"),
        (["--adapter", f"a={dirs['a']}", "--int8"], "--adapter NAME=DIR with --int8", ""),
        (["--adapter", f"a={dirs['a']}", "--compile"], "--adapter NAME=DIR with --compile", ""),
        (["--adapter", f"a={dirs['a']}", "--adapter", f"a={dirs['b']}"], "given twice", ""),
        (["--adapter", str(dirs["a"]), "--adapter", f"b={dirs['b']}"], "DIR alone merges one",
         ""),
        (["--adapter", f"run={dirs['a']}"], "is the base model's id", ""),
    ]
    for flags, first, more in cases:
        assert main(["serve", "--checkpoint", str(run), "--port", str(free_port()),
                     *flags]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Traceback" not in err, err
        assert first in err and more in err, err


def test_serve_command_serves_named_adapters_and_a_merged_one(base, tmp_path):
    model, tokenizer, dirs, _ = base
    run = save_lm_checkpoint(tmp_path / "run", model, tokenizer, step=1)
    body = {"prompt": PROMPTS[1], "max_tokens": 10, "temperature": 0}
    with LiveServer(create_lm_app(serving(base, ["b"]), LIMITS)) as live:
        want = httpx.post(live.url + "/v1/completions", json=body | {"model": "b"},
                          timeout=60).json()["choices"][0]["text"]
    server = Server(run, "--adapter", f"a={dirs['a']}", "--adapter", f"b={dirs['b']}")
    try:
        ids = [m["id"] for m in httpx.get(server.url + "/v1/models").json()["data"]]
        got = httpx.post(server.url + "/v1/completions", json=body | {"model": "b"},
                         timeout=60).json()["choices"][0]["text"]
    finally:
        assert server.stop() == 0
    assert ids == ["run", "a", "b"] and got == want
    merged = merge_adapter(dirs["b"], copy.deepcopy(model))
    ids = tokenizer.encode(PROMPTS[1])
    out = generate(merged, [ids], max_new_tokens=10, greedy=True, eos_id=tokenizer.eos_id)[0]
    server = Server(run, "--adapter", str(dirs["b"]))
    try:
        listed = httpx.get(server.url + "/v1/models").json()["data"]
        got = httpx.post(server.url + "/v1/completions", json=body, timeout=60).json()
    finally:
        assert server.stop() == 0
    assert [m["id"] for m in listed] == ["b"]
    assert got["choices"][0]["text"] == tokenizer.decode([t for t in out
                                                          if t != tokenizer.eos_id])
