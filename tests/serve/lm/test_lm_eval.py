"""lm-evaluation-harness against ``decoderkit serve`` with the documented command alone
(docs/lm-serving.md): the remote-tokenizer probe its ``local-completions`` model sends
(GET /tokenizer_info, POST /tokenize without special tokens), and, where lm-eval is installed
(the optional extra ``lmeval``), a run of a local task whose per-sample log-likelihoods equal
the model's own."""

from __future__ import annotations

import json
from dataclasses import replace

import httpx
import pytest
import torch
from fastapi.testclient import TestClient

from decoderkit.base.errors import UsageError
from decoderkit.cli import main
from decoderkit.interop.checkpoints import load_pretrained
from decoderkit.serve.lm.app import create_lm_app
from decoderkit.serve.lm.engines import from_lm
from decoderkit.text.lm.chat import ChatTemplate
from decoderkit.text.lm.tokenizer import END_OF_TEXT
from serve.lm.lm_serving import LiveServer, tiny_lm
from text.lm.chat_dirs import CHATML, chat_directory

NAME, CONTEXT = "tiny", 64


@pytest.fixture(scope="module")
def served():
    model, tokenizer = tiny_lm(context=CONTEXT)
    return from_lm(model, tokenizer, NAME)


def test_the_remote_tokenizer_probe_finds_what_lm_eval_reads(served):
    """lm-eval's check_remote_tokenizer_support and RemoteTokenizer, step by step."""
    client = TestClient(create_lm_app(served))
    info = client.get("/tokenizer_info").json()
    assert info["eos_token"] == END_OF_TEXT and info["model_max_length"] == CONTEXT
    assert "chat_template" in info and "bos_token" in info
    out = client.post("/tokenize", json={"prompt": END_OF_TEXT, "add_special_tokens": False})
    assert out.json()["tokens"] == [served.tokenizer.eos_id]  # its prefix token
    text = "To be, or not"
    ids = client.post("/tokenize", json={"prompt": text, "add_special_tokens": False}).json()
    assert ids["tokens"] == served.tokenizer.encode(text)
    back = client.post("/detokenize", json={"tokens": ids["tokens"]}).json()["prompt"]
    assert back == text
    bad = client.post("/tokenize", json={"prompt": text, "add_special_tokens": "no"})
    assert bad.status_code == 400 and "add_special_tokens" in bad.json()["error"]["message"]


def test_tokenizer_info_serves_no_file_from_outside_the_directory(tmp_path, capsys):
    """A chat_template.jinja linked to a file outside the model directory is not read: the
    template refused, `serve` refused in one line (the secret never shown); a directory in
    Hugging Face's cache layout (every file a link to ../../blobs/) serves its template."""
    secret = tmp_path / "secret.txt"
    secret.write_text("SECRET-API-KEY=abc")
    path = chat_directory(tmp_path / "linked", "chatml")
    (path / "chat_template.jinja").unlink()
    (path / "chat_template.jinja").symlink_to(secret)
    with pytest.raises(UsageError, match="outside the model directory"):
        ChatTemplate.find(path)
    capsys.readouterr()
    assert main(["serve", "--checkpoint", str(path), "--port", "65000"]) == 2  # before binding
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "chat_template.jinja is a link to" in err
    assert "SECRET" not in err
    repo, snapshot = tmp_path / "models--org--chat", chat_directory(tmp_path / "chat", "chatml")
    (repo / "blobs").mkdir(parents=True)
    (repo / "snapshots").mkdir()
    snapshot = snapshot.rename(repo / "snapshots" / "0123abcd")
    for file in snapshot.iterdir():
        file.rename(repo / "blobs" / f"sha-{file.name}")
        file.symlink_to(f"../../blobs/sha-{file.name}")
    model, tokenizer = load_pretrained(snapshot)
    served = replace(from_lm(model, tokenizer, NAME), chat=ChatTemplate.find(snapshot))
    info = TestClient(create_lm_app(served)).get("/tokenizer_info").json()
    assert info["chat_template"] == CHATML


def test_tokenizer_info_needs_the_token_as_every_route_but_health(served):
    client = TestClient(create_lm_app(served, token="s3cret-token-0123456789"))
    assert client.get("/tokenizer_info").status_code == 401
    ok = client.get("/tokenizer_info",
                    headers={"Authorization": "Bearer s3cret-token-0123456789"})
    assert ok.status_code == 200


TASK = """task: tiny_choice
dataset_path: json
dataset_kwargs:
  data_files: {data}
test_split: train
output_type: multiple_choice
target_delimiter: ""
doc_to_text: "{{{{context}}}}"
doc_to_choice: "{{{{choices}}}}"
doc_to_target: "{{{{label}}}}"
metric_list:
  - metric: acc
"""
DOCS = [{"context": "To be, or not", "choices": [" to be", " the", " and"], "label": 0},
        {"context": "The quick brown", "choices": [" fox", " dog"], "label": 0},
        {"context": "Once upon", "choices": [" a time", " the end", " ten"], "label": 1}]


def lm_eval_with_task(tmp_path, name: str, spec: str):
    """(lm_eval, a TaskManager holding task ``name``: ``spec`` over ``DOCS`` in a local JSON
    lines file); skipped where lm-eval is not installed."""
    lm_eval = pytest.importorskip("lm_eval", reason="lm-evaluation-harness is not installed "
                                  '(pip install "decoderkit[lmeval]")')
    from lm_eval.tasks import TaskManager

    data = tmp_path / "docs.jsonl"
    data.write_text("".join(json.dumps(d) + "\n" for d in DOCS))
    (tmp_path / f"{name}.yaml").write_text(spec.format(data=data))
    return lm_eval, TaskManager(include_path=str(tmp_path))


def test_lm_eval_local_completions_scores_as_the_model_does(tmp_path, served):
    lm_eval, tasks = lm_eval_with_task(tmp_path, "tiny_choice", TASK)
    with LiveServer(create_lm_app(served)) as server:
        # the documented model args: the model, the endpoint, the model's context
        args = f"model={NAME},base_url={server.url}/v1/completions,max_length={CONTEXT}"
        out = lm_eval.simple_evaluate(model="local-completions", model_args=args,
                                      tasks=["tiny_choice"], log_samples=True,
                                      task_manager=tasks)
    samples = out["samples"]["tiny_choice"]
    assert len(samples) == len(DOCS)
    tok, model = served.tokenizer, served.model
    for sample in samples:
        doc = sample["doc"]
        n = len(tok.encode(doc["context"]))  # lm-eval's split of the whole text's ids
        for choice, resp in zip(doc["choices"], sample["resps"], strict=True):
            ids = tok.encode(doc["context"] + choice)
            with torch.no_grad():
                logp = model(torch.tensor([ids])).log_softmax(-1)[0, n - 1:-1]
            want = float(logp.gather(1, torch.tensor(ids[n:])[:, None]).sum())
            assert resp[0][0] == pytest.approx(want, abs=1e-4)


CHAT = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}{% endfor %}"
        "{% if add_generation_prompt %}<|assistant|>{% endif %}")
GEN_TASK = """task: tiny_chat
dataset_path: json
dataset_kwargs:
  data_files: {data}
test_split: train
output_type: generate_until
doc_to_text: "{{{{context}}}}"
doc_to_target: "{{{{choices[0]}}}}"
generation_kwargs:
  until: ["\\n\\n"]
  max_gen_toks: 8
  do_sample: false
metric_list:
  - metric: exact_match
"""


def test_lm_eval_local_chat_completions_gets_the_chat_endpoints_replies(tmp_path, served):
    lm_eval, tasks = lm_eval_with_task(tmp_path, "tiny_chat", GEN_TASK)
    chat = replace(served, chat=ChatTemplate(CHAT))
    app = create_lm_app(chat)
    with LiveServer(app) as server:
        args = f"model={NAME},base_url={server.url}/v1/chat/completions"
        out = lm_eval.simple_evaluate(model="local-chat-completions", model_args=args,
                                      tasks=["tiny_chat"], log_samples=True,
                                      apply_chat_template=True,
                                      task_manager=tasks)
        samples = out["samples"]["tiny_chat"]
        assert len(samples) == len(DOCS)
        for sample in samples:  # the endpoint's own greedy reply to the same message
            want = httpx.post(f"{server.url}/v1/chat/completions", timeout=60, json={
                "model": NAME, "max_tokens": 8, "temperature": 0, "stop": ["\n\n"],
                "messages": [{"role": "user", "content": sample["doc"]["context"]}]}).json()
            assert sample["resps"][0][0] == want["choices"][0]["message"]["content"]
