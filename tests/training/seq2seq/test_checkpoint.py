"""Checkpoint round trip, atomic replacement and clear errors for bad files."""

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file

from decoderkit import make_model
from decoderkit.base.errors import UsageError
from decoderkit.training.seq2seq.checkpoint import has_checkpoint, load_checkpoint, save_checkpoint
from decoderkit.text.seq2seq.tokenizer import Tokenizer


def tiny(vocab=12, d_model=16, **kw):
    torch.manual_seed(0)
    return make_model(vocab, vocab, N=1, d_model=d_model, d_ff=32, h=2, dropout=0.0,
                      max_len=32, **kw)


@pytest.fixture()
def tok():
    return Tokenizer.characters(["abcdefgh"])  # 4 specials + 8 chars = 12


def test_round_trip_restores_weights_tokenizers_and_trainer_state(tmp_path, tok):
    model = tiny(tie_generator=True)
    state = {"optimizer": {"lr": torch.tensor(0.5)}, "rng": torch.get_rng_state()}
    save_checkpoint(tmp_path / "run", model, tok, tok, step=7, meta={"note": "x"},
                    trainer_state=state)
    ckpt = load_checkpoint(tmp_path / "run")
    assert ckpt.step == 7 and ckpt.meta["note"] == "x" and ckpt.config == model.config
    assert not ckpt.model.training
    for (name, a), b in zip(model.state_dict().items(), ckpt.model.state_dict().values(),
                            strict=True):
        assert torch.equal(a, b), name
    assert ckpt.model.generator.proj.weight is ckpt.model.tgt_embed.lut.weight  # still tied
    assert ckpt.src_tokenizer.decode(ckpt.src_tokenizer.encode("bad")) == "bad"
    assert ckpt.tgt_tokenizer.tokens([1, 4]) == ["<bos>", "a"]
    assert torch.equal(ckpt.trainer_state()["rng"], state["rng"])
    # weights on disk are plain safetensors that any reader can open
    assert "encoder.layers.0.self_attn.in_proj.weight" in load_file(tmp_path / "run" /
                                                                    "model.safetensors")


def test_save_replaces_atomically_and_crash_between_renames_is_recovered(tmp_path, tok):
    run = tmp_path / "run"
    save_checkpoint(run, tiny(), tok, tok, step=1)
    save_checkpoint(run, tiny(), tok, tok, step=2)
    assert load_checkpoint(run).step == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]
    holder = tmp_path / ".run.decoderkit-0123456789ab-previous"
    holder.mkdir()
    run.rename(holder / "checkpoint")  # as if killed after the first rename of a swap
    assert has_checkpoint(run) and load_checkpoint(run).step == 2
    save_checkpoint(run, tiny(), tok, tok, step=3)
    assert load_checkpoint(run).step == 3


def unverified(run):
    """Drop the checksums from meta.json, as in a checkpoint written before they existed, so
    the checks behind them (file formats, shapes, sizes) are reached."""
    meta = json.loads((run / "meta.json").read_text())
    del meta["sha256"]
    (run / "meta.json").write_text(json.dumps(meta))
    return run


def test_truncated_weights_are_a_clear_error(tmp_path, tok):
    run = tmp_path / "run"
    save_checkpoint(run, tiny(), tok, tok, step=1)
    data = (run / "model.safetensors").read_bytes()
    (run / "model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match="model.safetensors: checksum mismatch"):
        load_checkpoint(run)
    with pytest.raises(ValueError, match="model.safetensors: truncated"):
        load_checkpoint(unverified(run))


def test_checkpoint_from_another_config_names_the_tensor(tmp_path, tok):
    run = tmp_path / "run"
    save_checkpoint(run, tiny(), tok, tok, step=1)
    other = tmp_path / "other"
    save_checkpoint(other, tiny(d_model=32), tok, tok, step=1)
    shutil.copy(other / "model.safetensors", unverified(run) / "model.safetensors")
    with pytest.raises(ValueError, match=r"tensor '.*' has shape .*another config"):
        load_checkpoint(run)


def test_bad_config_and_tokenizer_files(tmp_path, tok):
    run = tmp_path / "run"
    save_checkpoint(run, tiny(), tok, tok, step=1)
    unverified(run)
    cfg = json.loads((run / "config.json").read_text())
    (run / "config.json").write_text(json.dumps({**cfg, "d_modle": 3}))
    with pytest.raises(ValueError, match=r"config.json: unknown model config field.*d_modle"):
        load_checkpoint(run)
    (run / "config.json").write_text(json.dumps({**cfg, "tgt_vocab": 13}))
    with pytest.raises(ValueError, match="tgt_tokenizer.json has 12 tokens.*tgt_vocab=13"):
        load_checkpoint(run)
    (run / "config.json").write_text(json.dumps(cfg))
    (run / "src_tokenizer.json").write_text("{not json")
    with pytest.raises(ValueError, match="src_tokenizer.json: not a valid tokenizer"):
        load_checkpoint(run)
    with pytest.raises(UsageError, match="no checkpoint"):
        load_checkpoint(tmp_path / "nowhere")
