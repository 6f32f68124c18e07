"""load_pretrained: one entry for every format a decoder-only LM comes in."""

from __future__ import annotations

import pytest
import torch

from decoderkit.base.errors import UsageError
from decoderkit.interop.hf_gpt import export_transformers
from decoderkit.interop.pretrained import load_pretrained
from decoderkit.nn.lm import DecoderOnlyLM, LMConfig
from decoderkit.training.lm.checkpoint import save_lm_checkpoint
from decoderkit.training.lm.tokenizer import LMTokenizer

IDS = torch.tensor([[1, 2, 3, 4, 0]])


def tiny() -> tuple[DecoderOnlyLM, LMTokenizer]:
    torch.manual_seed(0)
    tokenizer = LMTokenizer.characters("hello world")
    config = LMConfig(vocab_size=tokenizer.vocab_size, n_layers=1, d_model=8, n_heads=2,
                      d_ff=16, max_len=16, dropout=0.0)
    return DecoderOnlyLM(config).eval(), tokenizer


def test_lm_run_directory_and_hf_directory(tmp_path):
    model, tokenizer = tiny()
    save_lm_checkpoint(tmp_path / "run", model, tokenizer, step=3)
    export_transformers(model, tokenizer, tmp_path / "hf")
    with torch.no_grad():
        want = model(IDS)
        for name in ("run", "hf"):
            got, tok = load_pretrained(tmp_path / name)
            assert torch.equal(got(IDS), want), name
            assert tok.encode("hello") == tokenizer.encode("hello")


def test_anything_else_is_one_clear_error(tmp_path):
    with pytest.raises(UsageError, match="no such file or directory"):
        load_pretrained(tmp_path / "absent")
    (tmp_path / "config.json").write_text('{"model_type": "bert"}')
    with pytest.raises(UsageError, match="is not a decoder-only LM this version reads"):
        load_pretrained(tmp_path)


def test_params_counts_every_lm_format(tmp_path, capsys):
    from decoderkit.cli import main
    from decoderkit.interop.pretrained import pretrained_config
    from decoderkit.report.params import count_parameters

    model, tokenizer = tiny()
    save_lm_checkpoint(tmp_path / "run", model, tokenizer, step=3)
    export_transformers(model, tokenizer, tmp_path / "hf")
    for name in ("run", "hf"):
        assert pretrained_config(tmp_path / name) == model.config
        assert main(["params", "--checkpoint", str(tmp_path / name)]) == 0
        total = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("total")][0]
        assert int(total.split()[-1].replace(",", "")) == count_parameters(model)
    assert pretrained_config(tmp_path) is None
