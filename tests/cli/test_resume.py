"""``--resume`` fills each flag the command line leaves out from the run's own command lines,
a later one over an earlier; what it gives, and what a run without a record differs in, is
still refused by the resume checks; a recorded line this release cannot parse fills nothing."""

import json

from decoderkit.cli import main
from decoderkit.cli.resume import given
from decoderkit.training.seq2seq.checkpoint import load_checkpoint

TINY = ["--layers", "1", "--d-model", "16", "--heads", "2", "--d-ff", "32", "--valid-size", "8",
        "--batch-size", "16", "--warmup", "1", "--quiet", "--show", "0", "--threads", "1"]


def test_given_names_only_what_a_command_line_sets():
    assert given(["train", "--task", "copy", "--layers", "3", "--quiet"]) == {
        "task": "copy", "layers": 3, "quiet": True}
    assert given(["lm", "train", "--text", "a.txt", "b.txt", "--out", "r", "--eval-every",
                  "5"]) == {"text": ["a.txt", "b.txt"], "out": "r", "valid_every": 5}
    assert given(["lm", "sample", "--checkpoint", "r", "--prompt", "hi"]) == {
        "checkpoint": "r", "prompt": "hi"}


def _run(tmp_path, *extra):
    return ["train", "--task", "copy", "--out", str(tmp_path / "run"), *extra]


def test_a_resume_with_only_what_changes_goes_on_with_the_runs_own_flags(tmp_path):
    start = _run(tmp_path, "--train-size", "64", *TINY, "--lr-factor", "2", "--smoothing",
                 "0", "--max-steps", "2")
    assert main(start) == 0
    assert main(_run(tmp_path, "--resume", "--max-steps", "3")) == 0
    ckpt = load_checkpoint(tmp_path / "run")
    assert ckpt.step == 3 and ckpt.config.d_model == 16
    assert (ckpt.meta["train"]["lr_factor"], ckpt.meta["train"]["smoothing"]) == (2.0, 0.0)
    assert ckpt.meta["commands"] == [start, _run(tmp_path, "--resume", "--max-steps", "3")]
    assert main(_run(tmp_path, "--resume", "--max-steps", "4", "--valid-every", "1")) == 0
    ckpt = load_checkpoint(tmp_path / "run")
    assert ckpt.step == 4 and len(ckpt.meta["commands"]) == 3


def test_a_flag_given_anew_is_still_checked(tmp_path, capsys):
    assert main(_run(tmp_path, "--train-size", "64", *TINY, "--max-steps", "2")) == 0
    capsys.readouterr()
    assert main(_run(tmp_path, "--resume", "--max-steps", "3", "--accum", "2")) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith("only --max-steps, --time-limit, --valid-every, --patience, "
                        "--target-exact may change)") and "--accum is 2 here but 1" in err


def _drop_record(tmp_path, commands=None):
    meta = tmp_path / "run" / "meta.json"
    saved = json.loads(meta.read_text())
    del saved["commands"]
    if commands is not None:
        saved["commands"] = commands
    meta.write_text(json.dumps(saved))


def test_a_run_without_a_record_refuses_what_differs_as_before(tmp_path, capsys):
    assert main(_run(tmp_path, "--train-size", "64", *TINY, "--lr-factor", "2",
                     "--max-steps", "2")) == 0
    _drop_record(tmp_path)  # a run of an older release
    capsys.readouterr()
    assert main(_run(tmp_path, "--resume", "--train-size", "64", *TINY, "--max-steps", "3")) == 2
    assert "cannot resume: --lr-factor is 1.0 here but 2.0" in capsys.readouterr().err


def test_a_recorded_line_that_does_not_parse_fills_nothing_and_says_so(tmp_path, capsys):
    assert main(_run(tmp_path, "--train-size", "64", *TINY, "--lr-factor", "2",
                     "--max-steps", "2")) == 0
    _drop_record(tmp_path, [["train", "--task", "copy", "--no-such-flag"]])
    capsys.readouterr()
    assert main(_run(tmp_path, "--resume", "--train-size", "64", *TINY, "--max-steps", "3")) == 2
    err = capsys.readouterr().err
    assert "note: the command line 'train --task copy --no-such-flag' does not parse here" in err
    assert "cannot resume: --lr-factor is 1.0 here but 2.0" in err
    _drop_record(tmp_path, [["train", 3]])
    assert main(_run(tmp_path, "--resume", "--max-steps", "3")) == 2
    assert "'commands' must be a list of command lines" in capsys.readouterr().err
