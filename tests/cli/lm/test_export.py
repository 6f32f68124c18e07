"""``decoderkit lm export --to transformers``: GPT2LMHeadModel loads it with the same logits."""

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
