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


def test_a_hugging_face_classifier_directory_exports_as_a_classifier(tmp_path, capsys):
    """lm export picks the classifier path by the opener's family, for HF's directory too."""
    from decoderkit.interop.hf_gpt_classifier import export_classifier, load_hf_classifier
    from decoderkit.training.lm.tokenizer import LMTokenizer
    from interop.test_hf_gpt_classifier import classifier

    model = classifier()
    tokenizer = LMTokenizer.characters("to be or not")
    export_classifier(model, tokenizer, tmp_path / "hf")
    assert main(["lm", "export", "--to", "transformers", "--checkpoint", str(tmp_path / "hf"),
                 "--out", str(tmp_path / "again")]) == 0
    assert "GPT2ForSequenceClassification" in capsys.readouterr().out
    again, _ = load_hf_classifier(tmp_path / "again")
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(),
                                                  again.state_dict().values(), strict=True))
