"""Checkpoints never lose or silently use bad bytes: checksums verified on load, malformed
metadata refused, a save never replaces a file or a directory holding other files, and only
ever removes what it created itself."""

import json
import struct
from pathlib import Path

import pytest
import torch
from safetensors import SafetensorError

from decoderkit import make_model
from decoderkit.base.errors import UsageError
from decoderkit.training.seq2seq.checkpoint import has_checkpoint, load_checkpoint, save_checkpoint
from decoderkit.text.seq2seq.tokenizer import Tokenizer

FIXTURE = Path(__file__).parents[2] / "fixtures" / "checkpoint_0.1"  # written before checksums


@pytest.fixture()
def saved(tmp_path):
    tok = Tokenizer.characters(["abcdefgh"])
    torch.manual_seed(0)
    model = make_model(12, 12, N=1, d_model=16, d_ff=32, h=2, dropout=0.0, max_len=32)
    state = {"optimizer": {"lr": torch.tensor(0.5)}}

    def save(path=tmp_path / "run", step=1):
        return save_checkpoint(path, model, tok, tok, step=step, trainer_state=state)

    return save


def test_damaged_bytes_behind_a_valid_header_are_named_on_load(saved):
    run = saved()
    weights = run / "model.safetensors"
    data = bytearray(weights.read_bytes())
    header = struct.unpack("<Q", data[:8])[0]
    data[8 + header + 100] ^= 0xFF  # a tensor byte: the file still parses
    weights.write_bytes(bytes(data))
    with pytest.raises(UsageError, match=r"model.safetensors: checksum mismatch"):
        load_checkpoint(run)


@pytest.mark.parametrize("name", ["config.json", "src_tokenizer.json", "tgt_tokenizer.json"])
def test_every_file_is_verified(saved, name):
    run = saved()
    (run / name).write_bytes((run / name).read_bytes() + b"\n")  # still valid JSON
    with pytest.raises(UsageError, match=f"{name}: checksum mismatch"):
        load_checkpoint(run)


def test_trainer_state_is_verified_when_read(saved):
    run = saved()
    with (run / "trainer.pt").open("ab") as f:
        f.write(b"\0")
    ckpt = load_checkpoint(run)  # translating does not need it
    with pytest.raises(UsageError, match="trainer.pt: checksum mismatch"):
        ckpt.trainer_state()


def test_meta_records_a_sha256_of_every_other_file(saved):
    import hashlib

    run = saved()
    sums = json.loads((run / "meta.json").read_text())["sha256"]
    assert sorted(sums) == sorted(p.name for p in run.iterdir() if p.name != "meta.json")
    for name, digest in sums.items():
        assert hashlib.sha256((run / name).read_bytes()).hexdigest() == digest


def test_a_checkpoint_without_checksums_still_loads():
    ckpt = load_checkpoint(FIXTURE)
    assert ckpt.step == 0 and "sha256" not in ckpt.meta


@pytest.mark.parametrize("text,message", [
    ("[1, 2]", "expected a JSON object, got list"),
    ('{"step": "7"}', "'step' must be an int >= 0"),
    ('{"step": -1}', "'step' must be an int >= 0"),
    ('{"step": 1, "sha256": ["x"]}', "'sha256' must map"),
    ("{bad", "not valid JSON"),
    ("\udcff", "not valid JSON"),
])
def test_malformed_meta_is_a_usage_error(saved, text, message):
    run = saved()
    (run / "meta.json").write_bytes(text.encode("utf-8", "surrogateescape"))
    with pytest.raises(UsageError, match=message):
        load_checkpoint(run)


def test_save_refuses_a_file_and_a_directory_with_other_files(saved, tmp_path):
    file = tmp_path / "notes"
    file.write_text("mine")
    with pytest.raises(UsageError, match="is a file"):
        saved(file)
    assert file.read_text() == "mine" and not (tmp_path / "notes.old").exists()
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "draft.txt").write_text("mine")
    with pytest.raises(UsageError, match=r"not part of a decoderkit checkpoint \(draft.txt\)"):
        saved(folder)
    assert [p.name for p in folder.iterdir()] == ["draft.txt"]
    run = saved(tmp_path / "run")  # a checkpoint gone foreign is refused too
    (run / "README").write_text("mine")
    with pytest.raises(UsageError, match="README"):
        saved(run)
    assert (run / "README").read_text() == "mine"


def test_siblings_a_user_made_are_never_touched(saved, tmp_path):
    for name in ("run.old", "run.tmp"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "keep.txt").write_text(name)
    saved(tmp_path / "run")
    saved(tmp_path / "run", step=2)
    for name in ("run.old", "run.tmp"):
        assert (tmp_path / name / "keep.txt").read_text() == name
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run", "run.old", "run.tmp"]


@pytest.mark.parametrize("error", [
    OSError(28, "No space left on device"),
    RuntimeError("[enforce fail at inline_container.cc:603] . unexpected pos 64 vs 0"),  # torch's
    SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)"),
])
def test_a_full_disk_names_the_directory_and_keeps_the_previous_checkpoint(
        saved, tmp_path, monkeypatch, error):
    run = saved(step=1)
    weights = (run / "model.safetensors").read_bytes()

    def full(obj, file, *args, **kwargs):  # writes part of the file, then the disk is full
        Path(file).write_bytes(b"PK\x03\x04partial")
        raise error

    monkeypatch.setattr(torch, "save", full)
    with pytest.raises(UsageError) as caught:
        saved(step=2)
    message = str(caught.value)
    assert message.startswith(f"no space left on {tmp_path} (the partial write was removed")
    assert f"the previous checkpoint in {run} is intact" in message and "\n" not in message
    assert load_checkpoint(run).step == 1
    assert (run / "model.safetensors").read_bytes() == weights
    assert [p.name for p in tmp_path.iterdir()] == ["run"]  # the partial temporary is gone


def test_previous_checkpoint_is_found_after_a_crash_between_the_renames(saved, tmp_path):
    run = saved(step=3)
    holder = tmp_path / ".run.decoderkit-abcdef012345-previous"
    holder.mkdir()
    run.rename(holder / "checkpoint")
    assert has_checkpoint(run) and load_checkpoint(run).step == 3
    (tmp_path / ".other.decoderkit-abcdef012345-previous").mkdir()  # another name's: ignored
    assert not has_checkpoint(tmp_path / "elsewhere")
