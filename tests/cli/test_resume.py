"""``--resume`` fills each flag the command line leaves out from the run's own command lines,
a later one over an earlier; what it gives, and what a run without a record differs in, is
still refused by the resume checks; a recorded line this release cannot parse fills nothing."""

import json
import shutil
from pathlib import Path

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


FIXTURES = Path(__file__).parents[1] / "fixtures"


def _copy(tmp_path, name) -> Path:
    return Path(shutil.copytree(FIXTURES / name, tmp_path / name.replace("/", "-")))


def test_a_training_command_into_another_model_names_it_and_the_command_that_fits(
        tmp_path, capsys):
    lm, mt, ct2, gpt2 = (_copy(tmp_path, n) for n in (
        "lm_train_75f131b/run", "seq2seq_train_75f131b", "ct2_export_75f131b",
        "lm_export_hf_75f131b"))
    text = str(FIXTURES / "shakespeare_hamlet.txt")
    cases = [
        (["train", "--task", "copy", "--resume", "--out", str(lm)],
         f"is an lm train run directory, a language model, not a run of `decoderkit train`: "
         f"choose another --out (resume it with `decoderkit lm train --resume --out {lm}`)"),
        (["train", "--task", "copy", "--overwrite", "--out", str(ct2)],
         f"is a CTranslate2 export (decoderkit export --to ctranslate2), a translation model, "
         f"not a run of `decoderkit train`: choose another --out (`decoderkit translate "
         f"--engine ctranslate2 --model {ct2}` takes it)"),
        (["lm", "train", "--text", text, "--resume", "--out", str(mt)],
         f"is a decoderkit translation checkpoint (train), a translation model, not a run of "
         f"`decoderkit lm train`: choose another --out (resume it with `decoderkit train "
         f"--resume --out {mt}`)"),
        (["lm", "finetune", "--checkpoint", str(lm), "--data", text, "--resume", "--out",
          str(gpt2)], f"is a Hugging Face GPT-2 / OpenAI GPT directory, a language model, not "
         f"a run of `decoderkit lm finetune`: choose another --out (`decoderkit lm sample "
         f"--checkpoint {gpt2}` takes it)"),
    ]
    before = {p: sorted(x.name for x in p.iterdir()) for p in (lm, mt, ct2, gpt2)}
    for argv, needle in cases:
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        out = argv[argv.index("--out") + 1]
        assert len(err.splitlines()) == 1 and err.endswith(f"--out {out} {needle}"), err
    assert before == {p: sorted(x.name for x in p.iterdir()) for p in (lm, mt, ct2, gpt2)}
