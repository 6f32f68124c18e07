"""``decoderkit eval`` and ``translate`` read what a checkpoint claims before any work: a
meta.json whose data record asks for 10^12 pairs, a --max-len beyond the model's positions
(in every engine), each one line naming the file or the flag and the bound."""

import pytest

from conftest import tiny_checkpoint
from decoderkit.cli import main
from decoderkit.training.seq2seq.checkpoint import load_checkpoint, save_checkpoint


@pytest.mark.parametrize("field,value", [("train_size", 10**12), ("valid_size", 10**12),
                                         ("vocab_size", 10**9)])
def test_a_meta_json_claiming_a_huge_task_is_refused_not_generated(tmp_path, capsys, field,
                                                                   value):
    ckpt = load_checkpoint(tiny_checkpoint(tmp_path / "run"))
    data = {"task": "dates", "tsv": None, "src": None, "tgt": None, "train_size": 100,
            "valid_size": 10, "vocab_size": 100, "max_tokens": 60, "seed": 0, field: value}
    save_checkpoint(tmp_path / "run", ckpt.model, ckpt.src_tokenizer, ckpt.tgt_tokenizer,
                    step=1, meta={"data": data})
    assert main(["eval", "--checkpoint", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "meta.json: bad 'data' record" in err, err
    assert f"{field} must be an integer in [" in err and str(value) in err


@pytest.mark.parametrize("engine", ["decoderkit", "ctranslate2"])
def test_translate_max_len_beyond_the_model_names_the_flag_and_the_limit(tmp_path, capsys,
                                                                         engine):
    run = tiny_checkpoint(tmp_path / "run")  # max_len 64
    where = ["--checkpoint", str(run)]
    if engine == "ctranslate2":
        pytest.importorskip("ctranslate2")
        assert main(["export", "--to", "ctranslate2", "--checkpoint", str(run), "--out",
                     str(tmp_path / "ct2")]) == 0
        where = ["--engine", "ctranslate2", "--model", str(tmp_path / "ct2")]
    capsys.readouterr()
    assert main(["translate", *where, "--max-len", "65", "1 Nov 2026"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("decoderkit translate: error: --max-len 65 is more than the model's 64 "
                   "positions (its max_len): give at most 64"), err
    assert main(["translate", *where, "--max-len", "64", "1 Nov 2026"]) == 0
