"""``decoderkit train`` flags that reach the model config (the recipe for small real data,
docs/bible.md): --tie-generator shares the output layer with the target embedding;
--tokenizer spm-joint learns one sentencepiece vocabulary for both sides, which
--tie-embeddings needs (refused by name without it); --attention-dropout and --ffn-dropout
set those rates apart from --dropout (Marian's defaults: 0)."""

import json

import pytest

from decoderkit.cli import main
from decoderkit.training.seq2seq.checkpoint import load_checkpoint

TINY = ["--layers", "1", "--d-model", "16", "--heads", "2", "--d-ff", "32", "--valid-size", "8",
        "--batch-size", "16", "--max-steps", "2", "--warmup", "1", "--quiet", "--show", "0",
        "--threads", "1"]


def test_tie_generator_reaches_the_saved_config(tmp_path):
    out = tmp_path / "run"
    assert main(["train", "--task", "copy", "--out", str(out), "--train-size", "64",
                 "--tie-generator", *TINY]) == 0
    assert json.loads((out / "config.json").read_text())["tie_generator"] is True


def test_attention_and_ffn_dropout_reach_the_saved_config_and_the_model(tmp_path):
    out = tmp_path / "run"
    assert main(["train", "--task", "copy", "--out", str(out), "--train-size", "64",
                 "--dropout", "0.2", "--attention-dropout", "0", "--ffn-dropout", "0.05",
                 *TINY]) == 0
    saved = json.loads((out / "config.json").read_text())
    assert (saved["dropout"], saved["attention_dropout"], saved["ffn_dropout"]) == \
        (0.2, 0.0, 0.05)
    layer = load_checkpoint(out).model.decoder.layers[0]
    assert (layer.res1.dropout.p, layer.self_attn.dropout, layer.cross_attn.dropout,
            layer.ffn.dropout.p) == (0.2, 0.0, 0.0, 0.05)


def _corpus(tmp_path):
    words = "the cat sat on a mat and ate fish el gato comió pescado en la casa".split()
    lines = [f"{' '.join(words[i % 7:i % 7 + 4])}\t{' '.join(words[8 + i % 6:12 + i % 6])}"
             for i in range(120)]
    (tmp_path / "c.tsv").write_text("\n".join(lines) + "\n")
    return str(tmp_path / "c.tsv")


def test_joint_sentencepiece_vocabulary_ties_every_embedding(tmp_path):
    out = tmp_path / "run"
    assert main(["train", "--data", _corpus(tmp_path), "--out", str(out), "--tokenizer",
                 "spm-joint", "--vocab-size", "60", "--tie-embeddings", "--tie-generator",
                 *TINY]) == 0
    ckpt = load_checkpoint(out)
    m = ckpt.model
    assert ckpt.config.tie_embeddings and ckpt.config.tie_generator
    assert m.src_embed.lut.weight is m.tgt_embed.lut.weight is m.generator.proj.weight
    assert ckpt.src_tokenizer.vocab == ckpt.tgt_tokenizer.vocab  # one vocabulary, both sides
    assert ckpt.src_tokenizer.decode(ckpt.src_tokenizer.encode("el gato")) == "el gato"
    assert ckpt.meta["data"]["tokenizer"] == "spm-joint"


@pytest.mark.parametrize("data", [["--task", "copy"], ["--data", None]], ids=["task", "bpe"])
def test_tie_embeddings_without_one_vocabulary_is_refused_by_name(tmp_path, capsys, data):
    data = [d or _corpus(tmp_path) for d in data]
    assert main(["train", *data, "--out", str(tmp_path / "run"), "--tie-embeddings",
                 *TINY]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--tie-embeddings" in err
    assert "--tokenizer spm-joint" in err and ("--task copy" in err or "--tokenizer bpe" in err)
    assert not (tmp_path / "run").exists()


def test_resume_refuses_a_changed_training_setting_and_allows_a_longer_run(tmp_path, capsys):
    out = tmp_path / "run"
    base = ["train", "--task", "copy", "--out", str(out), "--train-size", "64", *TINY]
    assert main(base) == 0
    capsys.readouterr()
    for extra, expected in ((["--lr-factor", "2"], "--lr-factor is 2.0 here but 1.0"),
                            (["--smoothing", "0"], "--smoothing is 0.0 here but 0.1"),
                            (["--accum", "2"], "--accum is 2 here but 1")):
        assert main([*base, "--resume", "--max-steps", "3", *extra]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and f"cannot resume: {expected} in the run in " in err
    assert main([*base, "--resume", "--max-steps", "3", "--valid-every", "1",
                 "--target-exact", "0.99"]) == 0
    assert load_checkpoint(out).step == 3
