"""What a checkpoint records of its data: paths relative to the checkpoint (eval works from
any directory) and the corpus checksum (a changed corpus is refused without
--allow-changed-data, since its held-out split silently changes)."""

import json
import os

import pytest

from decoderkit.cli import main
from decoderkit.training.seq2seq.checkpoint import load_checkpoint
from decoderkit.training.seq2seq.fit import TrainConfig

TINY = ["--layers", "1", "--d-model", "16", "--heads", "2", "--d-ff", "32", "--max-len", "40",
        "--batch-size", "8", "--warmup", "2", "--valid-every", "2", "--vocab-size", "60",
        "--quiet", "--show", "0", "--threads", "1"]


@pytest.fixture()
def trained(tmp_path, monkeypatch):
    """A 2-step run on a corpus in tmp_path/data, trained from tmp_path as the cwd."""
    import torch

    threads = torch.get_num_threads()
    (tmp_path / "data").mkdir()
    words = ["cat", "dog", "bird", "fish", "cow"]
    corpus = tmp_path / "data" / "pairs.tsv"
    corpus.write_text("".join(f"the {a} sees a {b}\tle {b} voit un {a}\n"
                              for a in words for b in words))
    monkeypatch.chdir(tmp_path)
    assert main(["train", "--data", "data/pairs.tsv", "--out", "runs/m", "--max-steps", "2",
                 *TINY]) == 0
    yield tmp_path / "runs" / "m", corpus
    torch.set_num_threads(threads)


def test_recorded_paths_are_relative_to_the_checkpoint_and_eval_works_elsewhere(
        trained, tmp_path, monkeypatch, capsys):
    run, corpus = trained
    meta = load_checkpoint(run).meta
    assert meta["data"]["tsv"] == os.path.join("..", "..", "data", "pairs.tsv")
    assert (run / meta["data"]["tsv"]).resolve() == corpus.resolve()
    capsys.readouterr()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert main(["eval", "--checkpoint", "../runs/m"]) == 0
    assert "2 pairs | loss" in capsys.readouterr().out


def test_a_changed_corpus_is_refused_for_eval_and_resume_unless_allowed(trained, capsys):
    run, corpus = trained
    corpus.write_text(corpus.read_text().replace("cow", "owl"))
    for argv in (["eval", "--checkpoint", str(run)],
                 ["train", "--data", str(corpus), "--out", str(run), "--resume",
                  "--max-steps", "4", *TINY]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert "changed since" in err and "--allow-changed-data" in err
        assert len(err.strip().splitlines()) == 1
    assert load_checkpoint(run).step == 2
    assert main(["eval", "--checkpoint", str(run), "--allow-changed-data"]) == 0
    assert "warning: the corpus" in capsys.readouterr().err
    assert main(["train", "--data", str(corpus), "--out", str(run), "--resume",
                 "--max-steps", "4", "--allow-changed-data", *TINY]) == 0
    assert load_checkpoint(run).step == 4


def test_an_unchanged_corpus_resumes_and_old_checkpoints_keep_cwd_paths(trained, capsys):
    run, corpus = trained
    assert main(["train", "--data", "data/pairs.tsv", "--out", "runs/m", "--resume",
                 "--max-steps", "4", *TINY]) == 0
    meta_file = run / "meta.json"
    meta = json.loads(meta_file.read_text())
    for key in ("data_paths", "corpus_sha256", "sha256"):  # as written by 0.1
        del meta[key]
    meta["data"]["tsv"] = "data/pairs.tsv"
    meta_file.write_text(json.dumps(meta))
    capsys.readouterr()
    assert main(["eval", "--checkpoint", str(run)]) == 0


def test_train_config_fields_are_checked_naming_the_field():
    from decoderkit.base.errors import UsageError

    bad = {"clip": -1.0, "lr_factor": float("nan"), "valid_every": 0, "accum": 0,
           "warmup": 0, "smoothing": 1.0, "target_exact": 1.5, "patience": -1,
           "time_limit": 0.0, "batch_size": 2.0, "seed": 2**40}
    for field, value in bad.items():
        with pytest.raises(UsageError, match=f"{field} must be"):
            TrainConfig(**{field: value})
    TrainConfig(clip=None, time_limit=None, target_exact=None)


def test_an_exports_data_record_points_at_the_same_corpus(tmp_path):
    from decoderkit.training.seq2seq.prepare import (
        DataConfig,
        data_meta,
        recorded_data,
        relocated_data,
    )

    corpus = tmp_path / "data" / "pairs.tsv"
    corpus.parent.mkdir()
    corpus.write_text("a\tb\n")
    checkpoint, export = tmp_path / "runs" / "m", tmp_path / "exports" / "deep" / "ct2"
    meta = data_meta(DataConfig(tsv=str(corpus)), checkpoint)
    moved = relocated_data(meta, checkpoint, export)
    assert moved["corpus_sha256"] == meta["corpus_sha256"]
    assert (export / moved["data"]["tsv"]).resolve() == corpus.resolve()
    assert recorded_data(moved, export) == recorded_data(meta, checkpoint)
    assert relocated_data({"step": 1}, checkpoint, export) == {"data": None}
