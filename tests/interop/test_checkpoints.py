"""The one opener: every kind of model path opens through interop.checkpoints.load_checkpoint
(= decoderkit.load_checkpoint), as its family's checkpoint object with the config
checkpoint_config reads; a command of the other family refuses it in one line naming the
command that takes it; no model at all is one line naming the flag."""

from __future__ import annotations

import os
import shutil
import socket
from pathlib import Path

import pytest
import torch

import decoderkit
from conftest import tiny_checkpoint
from decoderkit.base.errors import UsageError
from decoderkit.cli import main
from decoderkit.interop import checkpoints
from decoderkit.base.families import CLASSIFIER, LM, SEQ2SEQ
from decoderkit.interop.checkpoints import (
    checkpoint_config,
    family_of,
    find_format,
    identify,
    load_checkpoint,
    load_pretrained,
)
from decoderkit.interop.gpt.hf import export_transformers
from decoderkit.nn.lm.classifier import GPTClassifier, classifier_config, with_new_tokens
from decoderkit.nn.seq2seq.model import EncoderDecoder
from decoderkit.nn.lm.model import DecoderOnlyLM, LMConfig
from decoderkit.report.params import count_parameters
from decoderkit.training.lm.checkpoint import LMCheckpoint, save_lm_checkpoint
from decoderkit.training.lm.classifier_checkpoint import save_classifier_checkpoint
from decoderkit.text.lm.tokenizer import LMTokenizer
from decoderkit.training.seq2seq.checkpoint import Checkpoint

IDS = torch.tensor([[1, 2, 3, 4, 0]])


def tiny() -> tuple[DecoderOnlyLM, LMTokenizer]:
    torch.manual_seed(0)
    tokenizer = LMTokenizer.characters("hello world")
    config = LMConfig(vocab_size=tokenizer.vocab_size, n_layers=1, d_model=8, n_heads=2,
                      d_ff=16, max_len=16, dropout=0.0)
    return DecoderOnlyLM(config).eval(), tokenizer


@pytest.fixture(scope="module")
def paths(tmp_path_factory) -> dict[str, Path]:
    """One path of every kind that needs no transformers to write."""
    root = tmp_path_factory.mktemp("kinds")
    model, tokenizer = tiny()
    grown = with_new_tokens(model, 3)
    head = GPTClassifier(grown, classifier_config(model, ("a", "b"), dropout=0.0)).eval()
    return {"translation": tiny_checkpoint(root / "translation"),
            "lm": save_lm_checkpoint(root / "lm", model, tokenizer, step=3),
            "gpt2": export_transformers(model, tokenizer, root / "gpt2"),
            "classifier": save_classifier_checkpoint(root / "classifier", head, tokenizer,
                                                     step=1)}


@pytest.mark.parametrize("kind,family,cls,module", [
    ("translation", SEQ2SEQ, Checkpoint, EncoderDecoder),
    ("lm", LM, LMCheckpoint, DecoderOnlyLM),
    ("gpt2", LM, LMCheckpoint, DecoderOnlyLM),
    ("classifier", CLASSIFIER, LMCheckpoint, GPTClassifier),
])
def test_every_kind_opens_as_its_family(paths, kind, family, cls, module):
    path = paths[kind]
    ckpt = load_checkpoint(path)
    assert find_format(path).family == family
    assert isinstance(ckpt, cls) and isinstance(ckpt.model, module) and not ckpt.model.training
    assert decoderkit.load_checkpoint is load_checkpoint
    config = checkpoint_config(path)
    assert config == (ckpt.model.lm.config if kind == "classifier" else ckpt.config)


def test_lm_paths_give_the_same_logits_and_tokenizer(paths):
    model, tokenizer = tiny()
    with torch.no_grad():
        want = model(IDS)
        for kind in ("lm", "gpt2"):
            got, tok = load_pretrained(paths[kind])  # the documented 0.2 pair
            assert torch.equal(got(IDS), want), kind
            assert tok.encode("hello") == tokenizer.encode("hello")


def test_foreign_formats_open_too(tmp_path):
    """Marian, OpenAI GPT and nanoGPT paths (written with transformers' models)."""
    pytest.importorskip("transformers")
    from interop.marian_helpers import write_marian
    from interop.gpt.test_hf import hf_model
    from interop.gpt.test_nanogpt import hf_gelu_model, write_ckpt

    hf_model("openai-gpt").save_pretrained(tmp_path / "gpt1")
    nano = write_ckpt(hf_gelu_model(), tmp_path / "nano")
    for path, family in ((write_marian(tmp_path / "marian"), SEQ2SEQ),
                         (tmp_path / "gpt1", LM), (nano, LM), (nano.parent, LM)):
        ckpt = load_checkpoint(path)
        assert find_format(path).family == family, path
        assert checkpoint_config(path) == ckpt.config, path


def one_line(capsys, argv: list[str]) -> str:
    assert main(argv) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_a_command_of_the_other_family_names_the_right_one(paths, capsys, tmp_path):
    lm, gpt2, mt, head = (str(paths[k]) for k in ("lm", "gpt2", "translation", "classifier"))
    cases = [
        (["translate", "--checkpoint", gpt2, "hi"], "is not a translation model: it is a "
         "Hugging Face GPT-2 / OpenAI GPT directory, a language model; use `decoderkit lm "
         "sample`"),
        (["translate", "--checkpoint", head, "hi"], "use `decoderkit lm classify`"),
        (["eval", "--checkpoint", lm], "it is an lm train run directory, a language model; "
         "use `decoderkit lm eval`"),
        (["export", "--checkpoint", lm, "--to", "onnx", "--out", str(tmp_path / "x")],
         "use `decoderkit lm export`"),
        (["serve", "--checkpoint", head], "use `decoderkit lm classify`"),
        (["lm", "sample", "--checkpoint", mt, "--prompt", "a"], "is not a language model: it "
         "is a decoderkit translation checkpoint (train), a translation model; use "
         "`decoderkit translate`"),
        (["lm", "eval", "--checkpoint", mt, "--text", mt + "/config.json"],
         "use `decoderkit eval`"),
        (["lm", "export", "--to", "transformers", "--checkpoint", mt, "--out",
          str(tmp_path / "y")],
         "use `decoderkit export`"),
        (["lm", "classify", "--checkpoint", lm, "hi"], "is not a fine-tuned classifier: it is "
         "an lm train run directory, a language model; use `decoderkit lm finetune`"),
    ]
    for argv, needle in cases:
        line = one_line(capsys, argv)
        path = Path(argv[argv.index("--checkpoint") + 1])
        assert needle in line and f"--checkpoint {path} " in line, (argv, line)
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()


def test_no_model_at_all_is_one_line_naming_the_flag(tmp_path, capsys):
    with pytest.raises(UsageError, match="--checkpoint .*absent: no such file or directory"):
        load_checkpoint(tmp_path / "absent")
    (tmp_path / "config.json").write_text('{"model_type": "bert"}')
    with pytest.raises(UsageError) as caught:
        load_checkpoint(tmp_path, families=(LM,))
    message = str(caught.value)
    assert message.endswith("a Hugging Face directory of model_type 'bert', which decoderkit "
                            "does not read (it reads model_type gpt2, openai-gpt, llama, "
                            "mistral, qwen2, qwen3)")
    (tmp_path / "config.json").unlink()
    line = one_line(capsys, ["translate", "--checkpoint", str(tmp_path), "hi"])
    assert "no checkpoint in it" in line and "Marian" in line and "lm train" not in line


def test_a_crash_mid_save_still_opens_the_previous_checkpoint(paths, tmp_path):
    run = tmp_path / "run"
    holder = tmp_path / ".run.decoderkit-0123456789ab-previous"
    holder.mkdir()
    shutil.copytree(paths["lm"], holder / "checkpoint")
    assert find_format(run).family == LM and load_checkpoint(run).step == 3


def test_params_counts_every_kind(paths, capsys):
    for kind in ("lm", "gpt2", "translation"):
        ckpt = load_checkpoint(paths[kind])
        assert main(["params", "--checkpoint", str(paths[kind])]) == 0
        total = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("total")][0]
        assert int(total.split()[-1].replace(",", "")) == count_parameters(ckpt.model), kind


def test_a_path_that_is_no_checkpoint_says_what_it_is(paths, tmp_path, capsys):
    os.mkfifo(tmp_path / "pipe")
    for path, kind in ((tmp_path / "pipe", "is a named pipe"),
                       ("/dev/null", "is a character device")):
        line = one_line(capsys, ["lm", "sample", "--checkpoint", str(path), "--prompt", "h"])
        assert line.endswith(f"--checkpoint {path} {kind}: no checkpoint there"), line
    gpt2 = shutil.copytree(paths["gpt2"], tmp_path / "gpt2")
    config = gpt2 / "config.json"
    text = config.read_text()
    config.write_text(text.replace(",", ",,", 1))
    line = one_line(capsys, ["lm", "sample", "--checkpoint", str(gpt2), "--prompt", "h"])
    assert f"--checkpoint {gpt2}: {config}: not valid JSON (" in line and "line 2 column" in line
    config.unlink()
    os.mkfifo(config)
    line = one_line(capsys, ["lm", "sample", "--checkpoint", str(gpt2), "--prompt", "h"])
    assert line.endswith(f"{config} is a named pipe, not a regular file"), line
    config.unlink()
    config.write_text(text)
    weights = gpt2 / "model.safetensors"
    weights.unlink()
    weights.mkdir()
    line = one_line(capsys, ["lm", "sample", "--checkpoint", str(gpt2), "--prompt", "h"])
    assert line.endswith(f"the weights file {weights} is a directory, not a regular file"), line


FIXTURES = Path(__file__).parents[1] / "fixtures"


def free_port() -> int:
    """A loopback port nothing listens on now (serve binds before it opens the checkpoint)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.parametrize("weights", ["model.safetensors", "pytorch_model.bin", None])
@pytest.mark.parametrize("kind", ["gemma", "bert", "t5"])
def test_a_hugging_face_directory_of_an_unread_model_type_is_named_by_it(
        tmp_path, capsys, kind, weights):
    (tmp_path / "config.json").write_text(f'{{"model_type": "{kind}"}}')
    if weights:
        (tmp_path / weights).write_bytes(b"x")
    assert identify(tmp_path).family is None and family_of(tmp_path) is None
    for argv, reads in ((["translate", "--checkpoint", str(tmp_path), "hi"], "marian"),
                        (["lm", "sample", "--checkpoint", str(tmp_path), "--prompt", "a"],
                         "gpt2, openai-gpt, llama, mistral, qwen2, qwen3"),
                        (["lm", "classify", "--checkpoint", str(tmp_path), "a"], "gpt2"),
                        (["serve", "--checkpoint", str(tmp_path), "--port", str(free_port())],
                         "marian, gpt2, openai-gpt, llama, mistral, qwen2, qwen3")):
        line = one_line(capsys, argv)
        assert line.endswith(f"--checkpoint {tmp_path}: a Hugging Face directory of model_type "
                             f"{kind!r}, which decoderkit does not read (it reads model_type "
                             f"{reads})"), line


def test_the_model_types_read_come_from_the_formats_table(tmp_path, monkeypatch):
    (tmp_path / "config.json").write_text('{"model_type": "gemma"}')
    extra = checkpoints.Format("a Hugging Face Gemma directory", "config.json model_type gemma",
                               LM, lambda p: True, None, None, ("gemma", "gemma2"))
    monkeypatch.setattr(checkpoints, "FORMATS", (*checkpoints.FORMATS[:-1], extra,
                                                 checkpoints.FORMATS[-1]))
    assert find_format(tmp_path) is extra
    (tmp_path / "config.json").write_text('{"model_type": "qwen9"}')
    with pytest.raises(UsageError, match=r"'qwen9', .*\(it reads model_type marian, gpt2, "
                       r"openai-gpt, llama, mistral, qwen2, qwen3, gemma, gemma2\)$"):
        find_format(tmp_path)


def test_an_export_given_as_a_checkpoint_names_the_command_that_runs_it(capsys):
    export = FIXTURES / "ct2_export_75f131b"
    assert identify(export).engine == "ctranslate2"
    for argv in (["translate", "--checkpoint", str(export), "hi"],
                 ["lm", "sample", "--checkpoint", str(export), "--prompt", "a"]):
        assert one_line(capsys, argv).endswith(
            f"--checkpoint {export} is a CTranslate2 export (decoderkit export --to "
            f"ctranslate2), a translation model, not a checkpoint; use `decoderkit translate "
            f"--engine ctranslate2 --model {export}`")
