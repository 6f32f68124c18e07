"""``decoderkit export`` and the --engine / --model / --int8 flags of translate and eval."""

from __future__ import annotations

import pytest
import torch

from conftest import tiny_checkpoint
from decoderkit.cli import main
from decoderkit.training.seq2seq.checkpoint import load_checkpoint, save_checkpoint

pytest.importorskip("ctranslate2")


def plain_checkpoint(directory) -> str:
    """``tiny_checkpoint`` whose pad, BOS and UNK are never generated: engines differ in their
    rules for those (and ours drop them from the text), not in anything this test checks."""
    ckpt = load_checkpoint(tiny_checkpoint(directory))
    with torch.no_grad():
        ckpt.model.generator.proj.bias[[0, 1, 3]] = -1e4
    save_checkpoint(directory, ckpt.model, ckpt.src_tokenizer, ckpt.tgt_tokenizer, step=0)
    return str(directory)


def one_line_error(capsys, argv: list[str], *needles: str) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    for needle in needles:
        assert needle in err, err


def test_export_then_translate_and_eval_with_ctranslate2(tmp_path, capsys):
    ckpt = plain_checkpoint(tmp_path / "ckpt")
    out = str(tmp_path / "ct2")
    assert main(["export", "--checkpoint", ckpt, "--to", "ctranslate2", "--out", out]) == 0
    assert "--engine ctranslate2" in capsys.readouterr().out
    lines = ["12 Nov", "3/4", "Dec 9"]
    assert main(["translate", "--checkpoint", ckpt, "--max-len", "10", *lines]) == 0
    ours = capsys.readouterr().out
    assert main(["translate", "--engine", "ctranslate2", "--model", out, "--max-len", "10",
                 *lines]) == 0
    assert capsys.readouterr().out == ours
    tsv = tmp_path / "pairs.tsv"
    tsv.write_text("12 Nov\t1-2\n3/4\t3.4\n")
    assert main(["eval", "--engine", "ctranslate2", "--model", out, "--data", str(tsv)]) == 0
    assert "2 pairs | ctranslate2, float32 weights | exact" in capsys.readouterr().out
    assert main(["eval", "--checkpoint", ckpt, "--int8", "--data", str(tsv)]) == 0
    assert "2 pairs | decoderkit int8 | loss" in capsys.readouterr().out
    assert main(["translate", "--checkpoint", ckpt, "--int8", "--max-len", "4", "12"]) == 0


def test_export_refusals_are_one_line(tmp_path, capsys):
    ckpt = str(tiny_checkpoint(tmp_path / "ckpt"))
    out = tmp_path / "out"
    out.mkdir()
    one_line_error(capsys, ["export", "--checkpoint", ckpt, "--to", "ctranslate2", "--out",
                            str(out)], "--overwrite")
    one_line_error(capsys, ["export", "--checkpoint", ckpt, "--to", "onnx", "--out",
                            str(tmp_path / "o"), "--quantization", "int8"], "--quantization")
    one_line_error(capsys, ["translate", "--engine", "ctranslate2", "12"], "--model")
    one_line_error(capsys, ["translate", "--model", str(out), "12"], "--engine")
    one_line_error(capsys, ["translate", "--engine", "onnxruntime", "--model", str(out), "1"],
                   "not a decoderkit export")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt", "out"]
