"""A GGUF file through every LM command, as a user gives it (``--checkpoint FILE.gguf``, the
directory holding it, an Ollama name): lm sample's greedy text, lm chat's reply through the
file's own template, lm eval's loss, serve's completions, chat completions and explorer, lm
export --to transformers (transformers' model of the export gives the file's logits), params;
each equal to what the same commands give on the model the file was exported from."""

from __future__ import annotations

import io
import json
import shutil

import pytest
import torch
from interop import gguf_helpers as h

from decoderkit.base.families import LM
from decoderkit.cli import build_parser, main
from decoderkit.interop.checkpoints import detected, load_checkpoint
from decoderkit.interop.gguf.export import export_gguf
from decoderkit.interop.gguf.writer import FILE

TEMPLATE = ("{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}{{ eos_token }}"
            "{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}")


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """(our tiny Llama, its tokenizer, its lm export --to gguf file with a chat template)."""
    lm, tokenizer = h.llama(tied=False), h.bpe_tokenizer()
    out = export_gguf(lm, tokenizer, tmp_path_factory.mktemp("gguf") / "x",
                      chat_template=TEMPLATE)
    return lm, tokenizer, out / FILE


def greedy(lm, tokenizer, prompt: str, n: int) -> str:
    """The model's own greedy continuation of ``prompt`` (its tokenizer's ids only)."""
    from decoderkit.generation.lm.complete import generate

    ids = generate(lm, [tokenizer.encode(prompt)], max_new_tokens=n, greedy=True,
                   eos_id=[tokenizer.eos_id], vocab=tokenizer.vocab_size)[0]
    return tokenizer.decode(ids)


def run(capsys, argv: list[str], stdin: str | None = None, monkeypatch=None) -> str:
    if stdin is not None:
        monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    assert main(argv) == 0, capsys.readouterr().err
    return capsys.readouterr().out


def test_lm_sample_continues_as_the_model_does(model, capsys):
    lm, tokenizer, file = model
    got = run(capsys, ["lm", "sample", "--checkpoint", str(file), "--prompt", "the quick",
                       "--max-new-tokens", "8", "--greedy"])
    want = greedy(lm, tokenizer, "the quick", 8)
    assert want in got, (want, got)


def test_lm_chat_renders_the_files_template(model, capsys, monkeypatch):
    _, _, file = model
    out = run(capsys, ["lm", "chat", "--checkpoint", str(file), "--greedy",
                       "--max-new-tokens", "4"], "hello\n", monkeypatch)
    assert out.strip(), out


def test_lm_eval_gives_the_models_loss(model, capsys, tmp_path):
    lm, tokenizer, file = model
    from decoderkit.interop.llama.hf_export import export_llama

    (tmp_path / "text.txt").write_text(" ".join(h.TEXT))
    source = export_llama(lm, tokenizer, tmp_path / "hf")  # the model the file came from
    got, want = (run(capsys, ["lm", "eval", "--checkpoint", str(path), "--text",
                              str(tmp_path / "text.txt")]).replace(str(path), "M")
                 for path in (file, source))
    assert got == want and "perplexity" in got, (got, want)


def test_params_counts_the_file(model, capsys):
    lm, _, file = model
    out = run(capsys, ["params", "--checkpoint", str(file)])
    assert f"{sum(p.numel() for p in lm.parameters()):,}" in out, out


def test_lm_export_to_transformers_gives_the_files_logits(model, tmp_path, capsys):
    transformers = pytest.importorskip("transformers")
    _, _, file = model
    run(capsys, ["lm", "export", "--checkpoint", str(file), "--to", "transformers", "--out",
                 str(tmp_path / "hf")])
    theirs = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "hf").eval()
    ours = load_checkpoint(file).model
    for ids in h.PROMPTS:
        with torch.no_grad():
            assert torch.allclose(ours(torch.tensor([ids])),
                                  theirs(torch.tensor([ids])).logits, atol=1e-5)


def test_serve_answers_completions_chat_and_the_explorer(model, tmp_path, monkeypatch):
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from decoderkit.cli.serve import limits_of, lm_app

    lm, tokenizer, file = model
    root = tmp_path / "ollama"  # the same file as Ollama keeps it, asked for by name
    digest = "12" * 32
    manifest = root / "manifests" / "registry.ollama.ai" / "library" / "tiny" / "latest"
    manifest.parent.mkdir(parents=True)
    manifest.write_text(json.dumps({"layers": [{"mediaType": "application/vnd.ollama.image."
                                                "model", "digest": f"sha256:{digest}"}]}))
    (root / "blobs").mkdir()
    shutil.copy(file, root / "blobs" / f"sha256-{digest}")
    monkeypatch.setenv("OLLAMA_MODELS", str(root))
    for name in (str(file), "tiny"):
        args = build_parser().parse_args(["serve", "--checkpoint", name])
        served, app = lm_app(args, detected(name), limits_of(args, LM), None)
        with TestClient(app) as client:
            model_id = client.get("/v1/models").json()["data"][0]["id"]
            done = client.post("/v1/completions", json={
                "model": model_id, "prompt": "the quick", "max_tokens": 6, "temperature": 0})
            assert done.status_code == 200, done.text
            assert done.json()["choices"][0]["text"] == greedy(lm, tokenizer, "the quick", 6)
            chat = client.post("/v1/chat/completions", json={
                "model": model_id, "messages": [{"role": "user", "content": "hi"}],
                "max_tokens": 4, "temperature": 0})
            assert chat.status_code == 200, chat.text
            seen = client.post("/v1/explore", json={"model": model_id, "prompt": "the fox"})
            assert seen.status_code == 200 and seen.json()["tokens"], seen.text


def test_lm_tune_tunes_the_file_and_its_adapter_opens_on_it(model, capsys, tmp_path):
    """Issue 42 §2 on a GGUF file: lm tune --checkpoint FILE.gguf writes a PEFT adapter whose
    base is the file; --checkpoint FILE.gguf --adapter RUN (and --checkpoint RUN alone) opens
    the tuned model, whose logits move off the file's and equal the adapter's on the Hugging
    Face directory the file came from."""
    from decoderkit.interop.llama.hf_export import export_llama

    lm, tokenizer, file = model
    data = tmp_path / "qa.jsonl"
    data.write_text("".join(json.dumps({"prompt": " ".join(h.TEXT[i % 4].split()[:3]),
                                        "completion": " " + h.TEXT[(i + 1) % 4]}) + "\n"
                            for i in range(12)))
    run(capsys, ["lm", "tune", "--checkpoint", str(file), "--data", str(data), "--out",
                 str(tmp_path / "run"), "--max-steps", "4", "--batch-size", "4", "--lr", "5e-2",
                 "--warmup", "1", "--rank", "4", "--quiet", "--threads", "1"])
    config = json.loads((tmp_path / "run" / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == str(file.resolve())
    source = export_llama(lm, tokenizer, tmp_path / "hf")  # the model the file came from
    ids = torch.tensor([h.PROMPTS[3]])
    with torch.no_grad():
        tuned = load_checkpoint(file, adapter=tmp_path / "run").model(ids)
        alone = load_checkpoint(tmp_path / "run").model(ids)
        on_hf = load_checkpoint(source, adapter=tmp_path / "run").model(ids)
        base = load_checkpoint(file).model(ids)
    assert (tuned - base).abs().max() > 1e-3
    assert torch.allclose(tuned, alone) and torch.allclose(tuned, on_hf, atol=1e-5)
    got = run(capsys, ["lm", "sample", "--checkpoint", str(file), "--adapter",
                       str(tmp_path / "run"), "--prompt", "the quick", "--max-new-tokens", "4",
                       "--greedy"])
    assert got.strip(), got
