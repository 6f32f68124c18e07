"""``decoderkit lm export --to transformers``: GPT2LMHeadModel loads it with the same logits."""

import os
from collections import Counter
import subprocess
from pathlib import Path

import pytest
import torch

from decoderkit.cli import main
from decoderkit.training.lm.checkpoint import load_lm_checkpoint


def test_export_to_transformers_gives_the_same_logits(run, tmp_path, capsys):
    transformers = pytest.importorskip("transformers")
    assert main(["lm", "export", "--to", "transformers", "--checkpoint", str(run), "--out",
                 str(tmp_path / "hf")]) == 0
    ckpt = load_lm_checkpoint(run)
    ours, tok = ckpt.model, ckpt.tokenizer
    theirs = transformers.GPT2LMHeadModel.from_pretrained(tmp_path / "hf").eval()
    ids = torch.tensor([tok.encode("To be, or not to be")[:16]])
    with torch.no_grad():
        assert torch.allclose(ours(ids), theirs(ids).logits, atol=1e-5)


def test_a_hugging_face_classifier_directory_exports_as_a_classifier(tmp_path, capsys):
    """lm export picks the classifier path by the opener's family, for HF's directory too."""
    from decoderkit.interop.gpt.classifier import export_classifier, load_hf_classifier
    from decoderkit.text.lm.tokenizer import LMTokenizer
    from interop.gpt.test_classifier import classifier

    model = classifier()
    tokenizer = LMTokenizer.characters("to be or not")
    export_classifier(model, tokenizer, tmp_path / "hf")
    assert main(["lm", "export", "--to", "transformers", "--checkpoint", str(tmp_path / "hf"),
                 "--out", str(tmp_path / "again")]) == 0
    assert "GPT2ForSequenceClassification" in capsys.readouterr().out
    again, _ = load_hf_classifier(tmp_path / "again")
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(),
                                                  again.state_dict().values(), strict=True))


def _assert_no_space(capsys, argv, parent) -> None:
    from cli.lm.helpers import one_line

    assert one_line(capsys, argv).startswith(
        f"decoderkit lm export: error: no space left on {parent} (the partial write was "
        "removed")
    assert not list(parent.iterdir()), "the partial export was left behind"


def test_a_full_disk_in_lm_export_is_one_line_and_leaves_no_partial_copy(run, tmp_path,
                                                                          capsys, monkeypatch):
    """safetensors raises its own error on a full disk (os error 28)."""
    import decoderkit.interop.lm.export as lm_export
    from safetensors import SafetensorError

    def full(tensors, file, metadata=None):
        Path(file).write_bytes(b"partial")
        raise SafetensorError("Error while serializing: I/O error: No space left on device "
                              "(os error 28)")

    monkeypatch.setattr(lm_export, "save_file", full)
    parent = tmp_path / "disk"
    parent.mkdir()
    _assert_no_space(capsys, ["lm", "export", "--to", "transformers", "--checkpoint", str(run),
                              "--out", str(parent / "hf")], parent)


@pytest.fixture
def tiny_disk(tmp_path):
    """A 64 KiB tmpfs mounted at tmp_path/disk (root only; skipped where mount is refused)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    if os.geteuid() != 0 or subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(disk)],
            capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root and mount permission)")
    yield disk
    subprocess.run(["umount", str(disk)], check=True)


def test_a_real_full_disk_in_lm_export(run, tiny_disk, capsys):
    _assert_no_space(capsys, ["lm", "export", "--to", "transformers", "--checkpoint", str(run),
                              "--out", str(tiny_disk / "hf")], tiny_disk)


def test_a_llama_family_directory_exports_as_one(tmp_path, capsys):
    """lm export of a Llama-family directory writes one AutoModelForCausalLM opens alike."""
    transformers = pytest.importorskip("transformers")
    from decoderkit.text.lm.tokenizer import LMTokenizer
    from interop.llama_helpers import save_hf

    hf = save_hf("qwen2-tied", tmp_path / "hf")
    LMTokenizer.characters("to be or not").save(tmp_path / "hf/tokenizer.json")
    assert main(["lm", "export", "--to", "transformers", "--checkpoint", str(tmp_path / "hf"),
                 "--out", str(tmp_path / "out")]) == 0
    assert "AutoModelForCausalLM" in capsys.readouterr().out
    again = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "out").eval()
    ids = torch.randint(0, 96, (1, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.equal(again(ids).logits, hf(ids).logits)


def _bad_outs(tmp_path) -> dict[str, tuple[str, str]]:
    """--out values the OS refuses -> (the path, what the one line must say)."""
    (tmp_path / "afile").write_text("mine")
    os.mkfifo(tmp_path / "pipe")
    long = "n" * 300
    return {"under a regular file": (str(tmp_path / "afile" / "x"),
                                     f"{tmp_path / 'afile'} is a regular file, not a directory"),
            "deeper under one": (str(tmp_path / "afile" / "y" / "z"), "is a regular file"),
            "under a pipe": (str(tmp_path / "pipe" / "x"), "is a named pipe, not a directory"),
            "a 300-character name": (str(tmp_path / long), "name too long (at most 207 bytes"),
            "a NUL byte": (str(tmp_path / "a\x00b"), "a name cannot hold a NUL byte"),
            "in /proc": ("/proc/decoderkit-out", "cannot be made there (")}


@pytest.mark.parametrize("case", ["under a regular file", "deeper under one", "under a pipe",
                                  "a 300-character name", "a NUL byte", "in /proc"])
def test_an_out_the_os_refuses_is_one_line_naming_it_and_why(run, tmp_path, capsys, case):
    """main: "[Errno 17] File exists" / "[Errno 36] File name too long" / ENOENT on /proc's
    temporary; one place (base.files.resolve_output_dir, write_directory) for every --out."""
    from cli.lm.helpers import one_line

    out, words = _bad_outs(tmp_path)[case]
    line = one_line(capsys, ["lm", "export", "--to", "transformers", "--checkpoint", str(run),
                             "--out", out])
    assert words in line and "Errno" not in line, line
    assert line.startswith("decoderkit lm export: error: --out "), line
    assert (tmp_path / "afile").read_text() == "mine"


def test_the_same_out_check_guards_lm_train(text, tmp_path, capsys):
    from cli.lm.helpers import TINY, one_line

    out, words = _bad_outs(tmp_path)["under a regular file"]
    line = one_line(capsys, ["lm", "train", "--text", str(text), "--out", out, *TINY,
                             "--max-steps", "4"])
    assert words in line, line


def test_a_llama_family_classifier_is_refused_saying_what_it_is(tmp_path, capsys):
    """main: "GPT2LMHeadModel cannot express positions='rope'"."""
    from cli.lm.helpers import one_line
    from decoderkit.nn.lm.classifier import GPTClassifier, classifier_config, with_new_tokens
    from decoderkit.nn.lm.model import DecoderOnlyLM
    from decoderkit.nn.lm.presets import lm_preset
    from decoderkit.training.lm.classifier_checkpoint import save_classifier_checkpoint
    from decoderkit.text.lm.tokenizer import LMTokenizer

    tokenizer = LMTokenizer.characters("to be or not")
    lm = DecoderOnlyLM(lm_preset("llama", vocab_size=tokenizer.vocab_size, n_layers=1))
    model = GPTClassifier(with_new_tokens(lm, 3), classifier_config(lm, ("a", "b"), 0.0))
    run = save_classifier_checkpoint(tmp_path / "cls", model, tokenizer, step=1)
    line = one_line(capsys, ["lm", "export", "--to", "transformers", "--checkpoint", str(run),
                             "--out", str(tmp_path / "hf")])
    assert "this classifier's LM is Llama-family (positions='rope', norm='rms'" in line
    assert "GPT2ForSequenceClassification" in line and "lm classify" in line
    assert not (tmp_path / "hf").exists()


MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "To be?"}]


@pytest.mark.parametrize("shape, in_config", [("chatml", False), ("llama3", True)])
def test_an_export_keeps_the_chat_template_and_chats_as_its_source(tmp_path, capsys, shape,
                                                                   in_config):
    """main: the export had neither chat_template.jinja nor a chat_template key, so serve and
    lm chat on it lost chat. The template (from chat_template.jinja or tokenizer_config.json)
    is written where transformers 5 writes it: AutoTokenizer's apply_chat_template on the
    export gives the source's ids, and the server's Chat Completions answers on it."""
    transformers = pytest.importorskip("transformers")

    from fastapi.testclient import TestClient

    from decoderkit.interop.checkpoints import load_checkpoint
    from decoderkit.serve.lm.app import create_lm_app
    from decoderkit.serve.lm.engines import from_checkpoint
    from text.lm.chat_dirs import chat_directory

    source = chat_directory(tmp_path / "src", shape, in_config=in_config)
    assert main(["lm", "export", "--to", "transformers", "--checkpoint", str(source), "--out",
                 str(tmp_path / "hf")]) == 0
    assert "its chat template in chat_template.jinja" in capsys.readouterr().out
    assert load_checkpoint(tmp_path / "hf").chat.source == load_checkpoint(source).chat.source
    want = transformers.AutoTokenizer.from_pretrained(source).apply_chat_template(
        MESSAGES, add_generation_prompt=True, tokenize=True, return_dict=False)
    got = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf").apply_chat_template(
        MESSAGES, add_generation_prompt=True, tokenize=True, return_dict=False)
    assert got == want and len(want) > 5
    ckpt = load_checkpoint(tmp_path / "hf")
    assert ckpt.chat.encode(ckpt.tokenizer, MESSAGES) == want
    served = from_checkpoint(ckpt, tmp_path / "hf")
    with TestClient(create_lm_app(served)) as http:
        r = http.post("/v1/chat/completions", json={"messages": MESSAGES, "max_tokens": 3})
        assert r.status_code == 200 and r.json()["usage"]["prompt_tokens"] == len(want), r.text


def test_lm_export_to_gguf_detects_the_format_and_the_architecture_once(tmp_path, monkeypatch):
    """The checkpoint's format (the opener's ``detected``) and the model's architecture (the
    table's ``architecture_of``, its Llama-shape test) are each looked for once on the way
    from ``lm export --to gguf`` to the file (they were twice and three times)."""
    from interop import gguf_helpers as h

    from decoderkit.interop import checkpoints
    from decoderkit.interop.gguf import export
    from decoderkit.interop.llama.hf_export import export_llama
    from decoderkit.interop.lm import architectures

    calls: Counter = Counter()

    def count(module, name: str) -> None:
        found = getattr(module, name)

        def counted(*args, **kwargs):
            calls[name] += 1
            return found(*args, **kwargs)
        monkeypatch.setattr(module, name, counted)

    hf = export_llama(h.llama(), h.bpe_tokenizer(), tmp_path / "hf")
    for module, name in ((checkpoints, "detected"), (architectures, "architecture_of"),
                         (export, "architecture_of"), (architectures, "is_llama_shaped")):
        count(module, name)
    assert main(["lm", "export", "--to", "gguf", "--checkpoint", str(hf), "--out",
                 str(tmp_path / "out")]) == 0
    assert calls == {"detected": 1, "architecture_of": 1, "is_llama_shaped": 1}
    assert (tmp_path / "out" / "model.gguf").is_file()
