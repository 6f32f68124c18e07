"""A damaged or edited checkpoint directory is one clear line naming the file (and the
tensor), never a hang, a huge allocation, a traceback or a model that loads wrong: every file
must be a regular file of sane size, every file be covered by a checksum, the weights be the
exact tensors of the config's model, floating point and finite."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from conftest import tiny_checkpoint
from decoderkit import make_model
from decoderkit.base.errors import UsageError
from decoderkit.base.files import file_sha256
from decoderkit.cli import main
from decoderkit.training.seq2seq.checkpoint import load_checkpoint, save_checkpoint
from decoderkit.training.checkpoint_dir import TEXT_BYTES, WEIGHTS
from decoderkit.text.seq2seq.tokenizer import Tokenizer


def reseal(run: Path) -> None:
    """Record the current bytes of every file in meta.json: an edit made consistently, so the
    checks behind the checksums are what is tested."""
    meta = json.loads((run / "meta.json").read_text())
    meta["sha256"] = {p.name: file_sha256(p) for p in run.iterdir() if p.name != "meta.json"}
    (run / "meta.json").write_text(json.dumps(meta))


def edit_config(run: Path, **changes) -> None:
    config = json.loads((run / "config.json").read_text())
    (run / "config.json").write_text(json.dumps({**config, **changes}))
    reseal(run)


def edit_weights(run: Path, change) -> None:
    tensors = load_file(run / WEIGHTS)
    change(tensors)
    save_file(tensors, run / WEIGHTS)
    reseal(run)


def refused(run: Path, *needles: str) -> str:
    with pytest.raises(UsageError) as caught:
        load_checkpoint(run)
    message = str(caught.value)
    assert "\n" not in message
    for needle in needles:
        assert needle in message, message
    return message


@pytest.fixture()
def run(tmp_path) -> Path:
    return tiny_checkpoint(tmp_path / "run")


@pytest.mark.parametrize("name", ["meta.json", "config.json", "src_tokenizer.json", WEIGHTS])
def test_a_pipe_or_a_directory_in_place_of_a_file_is_named_without_blocking(run, name):
    (run / name).unlink()
    os.mkfifo(run / name)  # reading it would wait for a writer forever
    refused(run, str(run / name), "is a named pipe, not a regular file")
    (run / name).unlink()
    (run / name).mkdir()
    refused(run, str(run / name), "is a directory")


def test_a_huge_meta_or_config_is_refused_by_its_size_unread(run):
    for name in ("meta.json", "config.json"):
        with (run / name).open("r+b") as f:
            f.truncate(TEXT_BYTES + 1)  # sparse: nothing written, nothing read
        refused(run, str(run / name), f"{TEXT_BYTES + 1} bytes")
        tiny_checkpoint(run)


def test_a_file_whose_checksum_meta_json_no_longer_records_is_refused(run):
    meta = json.loads((run / "meta.json").read_text())
    del meta["sha256"]["config.json"]
    (run / "meta.json").write_text(json.dumps(meta))
    refused(run, "records no checksum for config.json")


@pytest.mark.parametrize("change,needles", [
    ({"n_layers": 2}, ["is missing", "coder.layers.1.", "another layer count"]),
    ({"norm_first": True}, ["is missing", "norm"]),
])
def test_a_config_that_does_not_match_the_weights_names_file_and_tensor(run, change, needles):
    edit_config(run, **change)
    refused(run, str(run / WEIGHTS), "tensor", *needles)


def test_weights_of_more_layers_or_another_norm_placement_name_the_extra_tensor(tmp_path):
    for edit, needle in ((dict(n_layers=1), "coder.layers.1."), (dict(norm_first=False),
                                                                    "norm")):
        run = tmp_path / str(edit)
        torch.manual_seed(0)
        tok = Tokenizer.characters(["0123456789"])
        model = make_model(tok.vocab_size, tok.vocab_size, N=2, d_model=16, d_ff=32, h=2,
                           dropout=0.0, max_len=64, norm_first=True)
        save_checkpoint(run, model, tok, tok, step=0)
        edit_config(run, **edit)
        refused(run, str(run / WEIGHTS), "does not belong to the model config.json describes",
                needle)


def test_a_tensor_removed_from_the_weights_is_named(run):
    edit_weights(run, lambda t: t.pop("decoder.layers.0.ffn.w_2.bias"))
    refused(run, "tensor 'decoder.layers.0.ffn.w_2.bias'", "is missing")


@pytest.mark.parametrize("value,needle", [(float("nan"), "1 non-finite value(s)"),
                                          (float("inf"), "1 non-finite value(s)")])
def test_non_finite_weights_are_refused_at_load(run, value, needle):
    def poison(tensors):
        tensors["encoder.layers.0.ffn.w_1.weight"][3, 5] = value
    edit_weights(run, poison)
    refused(run, "tensor 'encoder.layers.0.ffn.w_1.weight'", needle)


def test_integer_weights_are_refused_at_load(run):
    def to_int(tensors):
        key = "generator.proj.bias"
        tensors[key] = tensors[key].round().to(torch.int32)
    edit_weights(run, to_int)
    refused(run, "tensor 'generator.proj.bias' is torch.int32, not floating point")


@pytest.mark.parametrize("change,needle", [
    ({"max_len": 10**12}, "max_len must be an integer in [1, 65536], got 1000000000000"),
    ({"d_model": 2**16, "n_heads": 2, "src_vocab": 2**20, "tgt_vocab": 2**20},
     "more than the"),
    ({"n_layers": 10**9}, "n_layers must be an integer in [1, 512]"),
])
def test_every_config_size_is_bounded_before_any_allocation(run, change, needle):
    edit_config(run, **change)
    refused(run, str(run / "config.json"), needle)


def test_a_tokenizer_that_is_not_utf8_or_not_json_is_one_line(run):
    (run / "src_tokenizer.json").write_bytes(b"\xff\xfe{")
    reseal(run)
    refused(run, str(run / "src_tokenizer.json"), "not a valid tokenizer file")
    (run / "src_tokenizer.json").write_text("[1, 2]")
    reseal(run)
    refused(run, str(run / "src_tokenizer.json"), "not a valid tokenizer file")


TINY = ["--layers", "1", "--d-model", "16", "--heads", "2", "--d-ff", "32", "--max-len", "40",
        "--batch-size", "16", "--train-size", "64", "--valid-size", "8", "--warmup", "2",
        "--valid-every", "2", "--quiet", "--show", "0"]


def test_resume_without_the_optimizer_state_is_refused_naming_it(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", "--task", "copy", "--out", str(out), "--max-steps", "2", *TINY]) == 0
    (out / "trainer.pt").unlink()
    reseal(out)
    before = (out / WEIGHTS).read_bytes()
    assert main(["train", "--task", "copy", "--out", str(out), "--resume", "--max-steps", "4",
                 *TINY]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert f"cannot resume {out}: it holds no trainer.pt" in line
    assert (out / WEIGHTS).read_bytes() == before
    torch.save({"optimizer": {}}, out / "trainer.pt")
    reseal(out)
    assert main(["train", "--task", "copy", "--out", str(out), "--resume", "--max-steps", "4",
                 *TINY]) == 2
    assert "its trainer.pt lacks scheduler, rng" in capsys.readouterr().err
