"""LM run directories: round trip, the shared verified and atomic machinery, clear refusals."""

import json

import pytest
import torch

from decoderkit.base.errors import UsageError
from decoderkit.nn.lm.model import DecoderOnlyLM, LMConfig
from decoderkit.training.lm.checkpoint import (
    is_lm_checkpoint,
    load_lm_checkpoint,
    save_lm_checkpoint,
)
from decoderkit.text.lm.tokenizer import LMTokenizer

TEXT = "to be, or not to be: that is the question\n"


@pytest.fixture
def saved(tmp_path):
    torch.manual_seed(0)
    tok = LMTokenizer.characters(TEXT)
    model = DecoderOnlyLM(LMConfig(vocab_size=tok.vocab_size, n_layers=1, d_model=16, n_heads=2,
                                   d_ff=32, max_len=16, dropout=0.0)).eval()
    out = save_lm_checkpoint(tmp_path / "run", model, tok, step=7, meta={"note": "x"},
                             trainer_state={"best_loss": 1.25, "rng": torch.arange(5)})
    return out, model, tok


def test_round_trip(saved):
    out, model, tok = saved
    ckpt = load_lm_checkpoint(out)
    loaded, tok2, meta = ckpt.model, ckpt.tokenizer, ckpt.meta
    ids = torch.tensor([tok.encode("to be or")])
    assert torch.equal(loaded(ids), model(ids)) and not loaded.training
    assert tok2.encode(TEXT) == tok.encode(TEXT)
    assert meta["step"] == 7 and meta["note"] == "x"
    assert set(meta["sha256"]) == {"model.safetensors", "config.json", "tokenizer.json",
                                   "trainer.pt"}
    state = load_lm_checkpoint(out).trainer_state()
    assert state["best_loss"] == 1.25 and torch.equal(state["rng"], torch.arange(5))
    assert is_lm_checkpoint(out) and not is_lm_checkpoint(out.parent)


def test_damage_and_mismatches_are_named(saved):
    out, model, tok = saved
    weights = out / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-3] ^= 0xFF
    weights.write_bytes(bytes(data))
    with pytest.raises(UsageError, match="model.safetensors: checksum mismatch"):
        load_lm_checkpoint(out)
    save_lm_checkpoint(out, model, tok, step=8)  # our own files: replaced
    config = json.loads((out / "config.json").read_text())
    config["vocab_size"] = tok.vocab_size - 1
    (out / "config.json").write_text(json.dumps(config))
    meta = json.loads((out / "meta.json").read_text())
    del meta["sha256"]  # as if written before checksums: the mismatch itself is caught
    (out / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(UsageError, match="tokenizer.json has 16 tokens but config.json says "
                       "vocab_size=15"):
        load_lm_checkpoint(out)
    config["vocab_size"] = tok.vocab_size + 1
    (out / "config.json").write_text(json.dumps(config))
    with pytest.raises(UsageError, match="tensor 'embed.lut.weight' has shape"):
        load_lm_checkpoint(out)


def test_foreign_files_are_never_replaced_and_a_crash_mid_swap_is_recovered(saved, tmp_path):
    out, model, tok = saved
    (out / "notes.txt").write_text("mine")
    with pytest.raises(UsageError, match=r"not part of a decoderkit checkpoint \(notes.txt\)"):
        save_lm_checkpoint(out, model, tok, step=9)
    (out / "notes.txt").unlink()
    holder = tmp_path / ".run.decoderkit-abcdef012345-previous"
    holder.mkdir()
    out.rename(holder / "checkpoint")
    assert load_lm_checkpoint(out).step == 7
    with pytest.raises(UsageError, match="no checkpoint in"):
        load_lm_checkpoint(tmp_path / "elsewhere")
