"""``make tune-demo``'s pipeline end to end at tiny sizes and few steps: lm data
shakespeare-genres --questions (the works faked: no download), lm train on the Llama block, lm
eval --choices before, lm tune (LoRA), lm eval --choices --adapter after; and the Makefile's
recipe runs those commands."""

from __future__ import annotations

import re
from pathlib import Path

from cli.lm.helpers import HAMLET, one_line
from decoderkit.cli import main
from decoderkit.training.lm import genre_questions
from training.lm.test_genre_questions import fake_works

MAKEFILE = Path(__file__).parents[3] / "Makefile"
ACCURACY = re.compile(r"^accuracy (\d\.\d{4}) \| 12 questions, answers ' comedy', ' history', "
                      r"' tragedy' \| always the commonest answer: 0\.3333$", re.M)


def test_the_demo_pipeline_runs_end_to_end(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(genre_questions, "fetch_works", lambda sdist: fake_works())
    qa, base, lora = tmp_path / "qa", tmp_path / "base", tmp_path / "lora"
    assert main(["lm", "data", "shakespeare-genres", "--questions", "--chars", "24",
                 "--per-play", "2", "--out", str(qa)]) == 0
    assert "test.jsonl: 12 questions on 24 characters (comedy 4, history 4, tragedy 4)" in \
        capsys.readouterr().out
    assert main(["lm", "train", "--preset", "llama", "--text", str(HAMLET), "--out", str(base),
                 "--tokenizer", "bpe", "--vocab-size", "300", "--layers", "1", "--d-model",
                 "32", "--heads", "2", "--block-size", "96", "--batch-size", "4",
                 "--warmup", "1", "--max-steps", "3", "--valid-every", "3", "--eval-blocks",
                 "4", "--quiet", "--threads", "1"]) == 0
    score = ["lm", "eval", "--checkpoint", str(base), "--choices", str(qa / "test.jsonl"),
             "--threads", "1"]
    capsys.readouterr()
    assert main(score) == 0
    assert ACCURACY.search(capsys.readouterr().out)
    assert main(["lm", "tune", "--checkpoint", str(base), "--data", str(qa / "train.jsonl"),
                 "--out", str(lora), "--max-steps", "3", "--valid-every", "3", "--batch-size",
                 "4", "--warmup", "1", "--quiet", "--threads", "1"]) == 0
    assert (lora / "adapter_model.safetensors").is_file()
    capsys.readouterr()
    assert main([*score, "--adapter", str(lora)]) == 0
    assert ACCURACY.search(capsys.readouterr().out)


def test_the_flags_are_refused_where_they_do_not_apply(capsys):
    assert "--questions applies to shakespeare-genres" in one_line(capsys, [
        "lm", "data", "shakespeare", "--questions", "--out", "x"])
    assert "--per-play applies to --questions" in one_line(capsys, [
        "lm", "data", "shakespeare-genres", "--per-play", "3", "--out", "x"])


def test_the_makefile_recipe_is_this_pipeline():
    recipe = MAKEFILE.read_text().split("\ntune-demo:", 1)[1].split("\n\n", 1)[0]
    for command in ("lm data shakespeare-genres --questions", "lm train $(TUNE_TRAIN)",
                    "lm eval $(TUNE_SCORE)", "lm tune $(TUNE_LORA)",
                    "lm eval $(TUNE_SCORE) --adapter"):
        assert command in recipe
