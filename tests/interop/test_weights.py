"""Every format's weights pass the one pipeline (nn.weights): a NaN, an inf, an integer tensor
or a value that is not a tensor is refused with one line naming the file and the tensor, in
our two checkpoint formats, HF Marian, GPT-2, OpenAI GPT and nanoGPT alike."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from conftest import tiny_checkpoint
from decoderkit.base.errors import UsageError
from decoderkit.interop.gpt.hf import load_hf_gpt
from decoderkit.interop.marian.hf import load_marian
from decoderkit.interop.gpt.nanogpt import load_nanogpt
from decoderkit.nn.lm.model import DecoderOnlyLM, LMConfig
from decoderkit.training.lm.checkpoint import load_lm_checkpoint, save_lm_checkpoint
from decoderkit.text.lm.tokenizer import LMTokenizer
from decoderkit.training.seq2seq.checkpoint import load_checkpoint
from interop.marian_helpers import write_marian
from interop.gpt.test_hf import hf_model
from interop.gpt.test_nanogpt import hf_gelu_model, write_ckpt

BAD = {"nan": float("nan"), "inf": float("-inf")}


def unsealed(directory: Path) -> None:
    """Drop meta.json's checksums (as a checkpoint from before them), so that what is checked
    is the weights themselves, not their changed bytes."""
    meta = json.loads((directory / "meta.json").read_text())
    del meta["sha256"]
    (directory / "meta.json").write_text(json.dumps(meta))


def lm_run(directory: Path) -> Path:
    torch.manual_seed(0)
    tok = LMTokenizer.characters("to be or not to be")
    model = DecoderOnlyLM(LMConfig(vocab_size=tok.vocab_size, n_layers=1, d_model=8, n_heads=2,
                                   d_ff=16, max_len=16, dropout=0.0))
    return save_lm_checkpoint(directory, model, tok, step=1)


def hf_dir(kind: str, directory: Path) -> Path:
    hf_model(kind).save_pretrained(directory)
    return directory


# format -> (write one into a directory, load it, the weights file, a tensor in it)
FORMATS = {
    "decoderkit": (tiny_checkpoint, load_checkpoint, "model.safetensors",
                   "encoder.layers.0.ffn.w_1.weight"),
    "lm-train": (lm_run, load_lm_checkpoint, "model.safetensors",
                 "blocks.layers.0.self_attn.in_proj.weight"),
    "marian": (write_marian, load_marian, "model.safetensors",
               "model.decoder.layers.1.encoder_attn.k_proj.weight"),
    "gpt2": (lambda d: hf_dir("gpt2", d), load_hf_gpt, "model.safetensors",
             "transformer.h.1.mlp.c_fc.weight"),
    "openai-gpt": (lambda d: hf_dir("openai-gpt", d), load_hf_gpt, "model.safetensors",
                   "transformer.h.0.ln_1.bias"),
}


def refused(load, path: Path, *needles: str) -> None:
    with pytest.raises(UsageError) as caught:
        load(path)
    message = str(caught.value)
    assert "\n" not in message and all(n in message for n in needles), message


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_a_non_finite_or_integer_weight_is_refused_naming_file_and_tensor(fmt, tmp_path):
    write, load, weights, name = FORMATS[fmt]
    directory = write(tmp_path / fmt)
    if (directory / "meta.json").exists():
        unsealed(directory)
    file = directory / weights
    clean = load_file(file)
    load(directory)  # loads as written
    for value in BAD.values():
        tensors = dict(clean)
        tensors[name] = tensors[name].clone()
        tensors[name].view(-1)[3] = value
        save_file(tensors, file)
        refused(load, directory, str(file), f"tensor {name!r}", "1 non-finite value(s)")
    save_file(clean | {name: clean[name].round().to(torch.int64)}, file)
    refused(load, directory, str(file), f"tensor {name!r}", "torch.int64, not floating point")


@pytest.mark.parametrize("bad", list(BAD))
def test_nanogpt_non_finite_or_non_tensor_weights_are_refused(bad, tmp_path):
    ckpt = write_ckpt(hf_gelu_model(), tmp_path)
    data = torch.load(ckpt, weights_only=True)
    name = "_orig_mod.transformer.h.1.attn.c_proj.weight"
    load_nanogpt(ckpt)
    data["model"][name].view(-1)[0] = BAD[bad]
    torch.save(data, ckpt)
    refused(load_nanogpt, ckpt, str(ckpt), f"tensor {name!r}", "1 non-finite value(s)")
    data["model"][name] = [1.0, 2.0]
    torch.save(data, ckpt)
    refused(load_nanogpt, ckpt, str(ckpt), f"tensor {name!r} is a list, not a tensor")
    data["model"][name] = torch.ones(16, 16, dtype=torch.int64)
    torch.save(data, ckpt)
    refused(load_nanogpt, ckpt, str(ckpt), f"tensor {name!r} is torch.int64, not floating point")


def test_a_bin_file_goes_through_the_same_checks(tmp_path):
    directory = hf_dir("gpt2", tmp_path / "gpt2")
    tensors = load_file(directory / "model.safetensors")
    (directory / "model.safetensors").unlink()
    tensors["transformer.wte.weight"][0, 0] = float("nan")
    torch.save(tensors, directory / "pytorch_model.bin")
    refused(load_hf_gpt, directory, "pytorch_model.bin", "tensor 'transformer.wte.weight'",
            "non-finite")
    for value, needle in ((tensors["transformer.wte.weight"].long(), "is torch.int64, not "
                           "floating point"), ({"a": 1}, "is a dict, not a tensor"),
                          ("text", "is a str, not a tensor")):
        torch.save(tensors | {"transformer.wte.weight": value}, directory / "pytorch_model.bin")
        refused(load_hf_gpt, directory, f"{directory / 'pytorch_model.bin'}: tensor "
                f"'transformer.wte.weight' {needle}")


def edit_json(file: Path, **changes) -> None:
    file.write_text(json.dumps(json.loads(file.read_text()) | changes))


HUGE = {"n_layers": 40, "d_model": 4096, "n_heads": 32, "d_ff": 16384}  # an LM: 8 billion
# format -> how its config claims 40 (encoder-decoder: 20 + 20) layers of width 4096, the
# module whose class builds it
CLAIMS = {
    "decoderkit": (lambda d: edit_json(d / "config.json", **HUGE | {"n_layers": 20}),
                   "decoderkit.training.seq2seq.checkpoint.EncoderDecoder"),
    "lm-train": (lambda d: edit_json(d / "config.json", **HUGE),
                 "decoderkit.training.lm.checkpoint.DecoderOnlyLM"),
    "marian": (lambda d: edit_json(d / "config.json", encoder_layers=20, decoder_layers=20,
                                   d_model=4096, encoder_ffn_dim=16384, decoder_ffn_dim=16384),
               "decoderkit.interop.marian.hf.EncoderDecoder"),
    "gpt2": (lambda d: edit_json(d / "config.json", n_layer=40, n_embd=4096, n_head=32),
             "decoderkit.interop.gpt.hf.DecoderOnlyLM"),
    "openai-gpt": (lambda d: edit_json(d / "config.json", n_layer=40, n_embd=4096, n_head=32),
                   "decoderkit.interop.gpt.hf.DecoderOnlyLM"),
}


@pytest.mark.parametrize("fmt", list(CLAIMS))
def test_a_config_claiming_40_layers_of_4096_is_refused_before_building(fmt, tmp_path,
                                                                         monkeypatch):
    write, load, weights, _ = FORMATS[fmt]
    claim, builder = CLAIMS[fmt]
    directory = write(tmp_path / fmt)
    if (directory / "meta.json").exists():
        unsealed(directory)
    claim(directory)
    monkeypatch.setattr(builder, lambda *a: pytest.fail("the model was built"))
    refused(load, directory, f"{directory / weights} holds at most ",
            "config.json describes a model of at least ", "parameters")


def test_a_nanogpt_claim_is_checked_against_its_tensors(tmp_path, monkeypatch):
    ckpt = write_ckpt(hf_gelu_model(), tmp_path)
    data = torch.load(ckpt, weights_only=True)
    torch.save(data | {"model_args": data["model_args"] | {"n_layer": 40, "n_embd": 4096}},
               ckpt)
    monkeypatch.setattr("decoderkit.interop.gpt.hf.DecoderOnlyLM",
                        lambda *a: pytest.fail("the model was built"))
    refused(load_nanogpt, ckpt, f"{ckpt} holds at most ", "model_args describes a model of at "
            "least 8,", "parameters")
