"""Shakespeare's genres as questions: whole held-out plays, the question's text, at most
per_play passages evenly spaced, as many questions of each genre, files never over another's;
the choice accuracy equal to scoring each answer by its own unpadded forward pass in
float64."""

import json

import pytest
import torch

from decoderkit.base.errors import UsageError
from decoderkit.nn.lm.model import DecoderOnlyLM
from decoderkit.nn.lm.presets import lm_preset
from decoderkit.training.lm import genre_questions
from decoderkit.training.lm.genre_questions import (
    ANSWERS,
    balanced,
    choice_accuracy,
    question_tables,
    read_questions,
    spaced,
)
from decoderkit.training.lm.genres import FOLIO, TEST_PLAYS
from decoderkit.training.lm.tune_data import completion_example
from training.lm.test_genres import fake_works


def rows(table: str) -> list[dict]:
    return [json.loads(line) for line in table.splitlines()]


def test_tables_ask_each_passage_of_whole_plays():
    tables = question_tables(fake_works(), 40)
    test, train = rows(tables["test.jsonl"]), rows(tables["train.jsonl"])
    first = test[0]
    assert first["prompt"].startswith("Comedy, history or tragedy?\n")
    assert first["prompt"].endswith("\nAnswer:") and first["completion"] in ANSWERS
    assert all(any(f"{p} line" in r["prompt"] for p in TEST_PLAYS) for r in test)
    assert not any(any(f"{p} line" in r["prompt"] for p in TEST_PLAYS) for r in train)
    assert {r["completion"].strip() for r in train} == set(FOLIO.values())


def test_per_play_keeps_evenly_spaced_passages():
    assert spaced(list(range(10)), 3) == [0, 3, 6]
    assert spaced(list(range(2)), 3) == [0, 1]
    tables = question_tables(fake_works(), 40, per_play=2)
    assert len(rows(tables["test.jsonl"])) == 2 * len(TEST_PLAYS)
    with pytest.raises(UsageError, match="per_play"):
        question_tables(fake_works(), 40, per_play=0)


def test_each_file_asks_as_many_questions_of_each_genre():
    assert balanced([("a", "1"), ("a", "2"), ("b", "3"), ("a", "4"), ("b", "5"),
                     ("a", "6")]) == ["1", "3", "4", "5"]
    tables = question_tables(fake_works(), 40, per_play=3)
    train = [r["completion"] for r in rows(tables["train.jsonl"])]
    # the training plays: 12 comedies, 8 histories, 10 tragedies; 3 passages each
    assert [train.count(a) for a in ANSWERS] == [24, 24, 24]
    comedies = [r["prompt"] for r in rows(tables["train.jsonl"]) if r["completion"] == " comedy"]
    assert len({s for s in FOLIO for p in comedies if f"{s} line" in p}) == 12  # every one
    test = [r["completion"] for r in rows(tables["test.jsonl"])]
    assert [test.count(a) for a in ANSWERS] == [6, 6, 6]


def test_files_are_written_once_and_never_over_another(tmp_path, monkeypatch):
    monkeypatch.setattr(genre_questions, "fetch_works", lambda sdist: fake_works())
    paths = genre_questions.shakespeare_questions(tmp_path, 40, 3)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["test.jsonl", "train.jsonl"]
    assert genre_questions.shakespeare_questions(tmp_path, 40, 3) == paths
    assert len(read_questions(paths["test.jsonl"])) == 3 * len(TEST_PLAYS)
    with pytest.raises(UsageError, match="train.jsonl exists and is not these examples"):
        genre_questions.shakespeare_questions(tmp_path, 40, 4)


class Chars:
    """A character tokenizer (ids = code points mod 50) with an end of text id 50."""

    eos_id = 50

    def encode(self, text):
        return [ord(c) % 50 for c in text]


def test_choice_accuracy_is_the_unpadded_float64_argmax():
    torch.manual_seed(0)
    model = DecoderOnlyLM(lm_preset("llama", vocab_size=51, n_layers=1, d_model=16,
                                    n_heads=4, max_len=64))
    examples = [{"prompt": f"q{i} " + "ab" * i, "completion": a}
                for i, a in zip(range(12), ANSWERS * 4, strict=True)]
    wide = DecoderOnlyLM(model.config).double()
    wide.load_state_dict(model.state_dict())
    right = 0
    for e in examples:
        scores = []
        for a in ANSWERS:
            x = completion_example(Chars(), e["prompt"], a)
            with torch.no_grad():
                logp = torch.log_softmax(wide(torch.tensor([x.ids[:-1]]))[0], dim=-1)
            scores.append(sum(float(logp[j - 1, t]) for j, t in enumerate(x.ids)
                              if x.trained[j]))
        right += ANSWERS[max(range(3), key=scores.__getitem__)] == e["completion"]
    assert choice_accuracy(model, Chars(), examples, ANSWERS, batch_size=5) == \
        right / len(examples)
    assert 0 < right < len(examples)  # the answers differ: the test can fail
    with pytest.raises(UsageError, match="outside the answers"):
        choice_accuracy(model, Chars(), [{"prompt": "x", "completion": " poem"}], ANSWERS)
