"""``decoderkit lm train``: learns, resumes bit-exact after a kill, refuses bad input in one
line writing nothing outside --out, and builds the model the flags say."""

import os
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file

from cli.lm.helpers import TINY, one_line
from decoderkit.cli import main
from decoderkit.training.lm.checkpoint import load_lm_checkpoint

# `decoderkit ARGS...`, SIGKILLed right after the checkpoint of step STEP is saved: a crash at
# a known point with no hook in the library. argv: STEP ARGS...
KILL_AFTER_SAVE = """
import os, signal, sys
from decoderkit.cli import main
from decoderkit.training.lm import fit as lm_fit
real_save = lm_fit.save_lm_checkpoint
def save_then_die(*args, step, **kwargs):
    real_save(*args, step=step, **kwargs)
    if step == int(sys.argv[1]):
        os.kill(os.getpid(), signal.SIGKILL)
lm_fit.save_lm_checkpoint = save_then_die
sys.exit(main(sys.argv[2:]))
"""



def test_train_learns_and_keeps_the_best_validation(text, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["lm", "train", "--text", str(text), "--out", str(out), *TINY,
                 "--max-steps", "60", "--valid-every", "20", "--lr", "3e-3"]) == 0
    ckpt = load_lm_checkpoint(out)
    model, tok, meta = ckpt.model, ckpt.tokenizer, ckpt.meta
    losses = [h["loss"] for h in meta["history"]]
    assert len(losses) == 3 and losses[2] < losses[0] < 4.2  # ln(vocab ~60) = 4.1 at start
    assert meta["step"] == 60 and meta["tokenizer"] == "char" and meta["text"] == [
        os.path.relpath(text, out)]
    assert model.config.max_len == 16 and model.config.n_layers == 1
    assert tok.vocab_size == len(set(text.read_text())) == model.config.vocab_size
    printed = capsys.readouterr().out
    assert f"validation loss {losses[2]:.4f}" in printed and f"checkpoint: {out}" in printed


@pytest.fixture()
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    torch.set_num_threads(threads)


def test_a_killed_run_resumes_to_bit_identical_weights(text, tmp_path, one_thread):
    def args(out, *extra):
        return ["lm", "train", "--text", str(text), "--out", str(out), *TINY, "--dropout",
                "0.1", "--max-steps", "12", "--eval-every", "4", "--lr", "3e-3", *extra]

    assert main(args(tmp_path / "whole")) == 0
    killed = subprocess.run([sys.executable, "-c", KILL_AFTER_SAVE, "8",
                             *args(tmp_path / "cut")],
                            capture_output=True, text=True, timeout=300, env=one_thread)
    assert killed.returncode == -9, killed.stderr
    assert load_lm_checkpoint(tmp_path / "cut").step == 8
    assert main(["lm", "train", "--text", str(text), "--out", str(tmp_path / "cut"),
                 "--resume"]) == 0  # every other flag: the run's own (cli.resume)
    whole = load_file(tmp_path / "whole" / "model.safetensors")
    cut = load_file(tmp_path / "cut" / "model.safetensors")
    assert whole.keys() == cut.keys()
    assert all(torch.equal(whole[k], cut[k]) for k in whole)


def test_bad_input_is_one_line_and_writes_nothing_outside_out(text, tmp_path, capsys):
    def train(path, *extra):
        return one_line(capsys, ["lm", "train", "--text", str(path), "--out",
                                 str(tmp_path / "run"), *TINY, *extra])

    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"good text\n" * 10 + b"\xc3\x28 broken")
    assert "bad.txt: not UTF-8 (byte 0xc3 at byte offset 100)" in train(bad)
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"")
    assert "empty.txt: empty text" in train(empty)
    short = tmp_path / "short.txt"
    short.write_text("x" * 100)
    assert "short.txt: its held-out part (last 10%) is 10 tokens, fewer than block size + 1 " \
        "= 17" in train(short)
    assert f"--text {tmp_path / 'missing.txt'} does not exist" in train(tmp_path / "missing.txt")
    assert "--text /dev/zero is a character device, not a regular file" in train("/dev/zero")
    assert "--vocab-size applies to --tokenizer bpe" in train(text, "--vocab-size", "300")
    assert "d_model must be divisible by n_heads" in train(text, "--heads", "3")
    before = sorted(p.name for p in tmp_path.iterdir())
    assert before == ["bad.txt", "empty.txt", "short.txt"]  # no run, no lock, nothing else
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep")
    assert "notes.txt" in one_line(capsys, ["lm", "train", "--text", str(text), "--out",
                                            str(mine), *TINY, "--overwrite"])
    assert [p.name for p in mine.iterdir()] == ["notes.txt"]


def test_model_flags_over_a_preset_and_the_default_shape():
    from decoderkit.cli import build_parser
    from decoderkit.cli.lm.train import model_config

    def config(*flags):
        return model_config(build_parser().parse_args(
            ["lm", "train", "--text", "t", "--out", "o", *flags]))

    default = config()  # nanoGPT's architecture at its CPU size, the context = block size
    assert (default.n_layers, default.d_model, default.n_heads, default.d_ff,
            default.dropout, default.activation, default.max_len) == (4, 128, 4, 512, 0.0,
                                                                      "gelu", 64)
    gpt1 = config("--preset", "gpt1", "--layers", "2", "--d-model", "64", "--heads", "2",
                  "--block-size", "32")
    assert (gpt1.norm_first, gpt1.activation, gpt1.d_ff, gpt1.dropout, gpt1.max_len,
            gpt1.n_layers) == (False, "gelu_tanh", 256, 0.1, 32, 2)
    gpt2 = config("--preset", "gpt2", "--d-ff", "100")
    assert (gpt2.d_model, gpt2.n_heads, gpt2.d_ff, gpt2.n_layers) == (768, 12, 100, 12)
    llama = config("--preset", "llama", "--d-model", "64")  # a gated FFN: 8 d / 3, to 8
    assert (llama.positions, llama.ffn, llama.d_ff, llama.kv_heads) == ("rope", "gated", 176, 2)


@pytest.mark.parametrize("extra,flag,given,saved", [
    (["--seed", "7"], "--seed", "7", "0"),
    (["--batch-size", "4"], "--batch-size", "4", "8"),
    (["--lr", "0.002"], "--lr", "0.002", "0.001"),
    (["--warmup", "3"], "--warmup", "3", "2"),
    (["--tokenizer", "bpe"], "--tokenizer", "'bpe'", "'char'"),
])
def test_resume_refuses_a_changed_setting_naming_both_values(run, text, capsys, extra, flag,
                                                             given, saved):
    err = one_line(capsys, ["lm", "train", "--resume", "--text", str(text), "--out", str(run),
                            *TINY, "--max-steps", "31", *extra])
    assert f"cannot resume: {flag} is {given} here but {saved} in the run in " in err, err


def test_resume_may_go_on_longer_and_be_watched_differently(run, text, tmp_path):
    """--max-steps, --time-limit, --valid-every, --patience, --eval-blocks may change."""
    import shutil

    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    assert main(["lm", "train", "--resume", "--text", str(text), "--out", str(copy), *TINY,
                 "--max-steps", "32", "--valid-every", "1", "--eval-blocks", "8",
                 "--patience", "3", "--time-limit", "600"]) == 0


def test_a_warmup_longer_than_the_run_is_refused_before_any_work(text, tmp_path, capsys):
    err = one_line(capsys, ["lm", "train", "--text", str(text), "--out", str(tmp_path / "r"),
                            *TINY, "--warmup", "50", "--max-steps", "20"])
    assert err.endswith("--warmup 50 is longer than --max-steps 20: the learning rate would "
                        "never reach its peak; give --warmup at most 20")
    assert list(tmp_path.iterdir()) == []


def test_a_diverged_run_stops_before_saving_over_its_last_checkpoint(text, tmp_path, capsys,
                                                                      monkeypatch):
    """NaN weights saved would be refused on load: the good checkpoint of step 2 stays."""
    import math

    from decoderkit.training.lm import fit as lm_fit
    from decoderkit.training.lm.objective import LMMetrics

    real, calls = lm_fit.LanguageModel.validate, []

    def validate(self, model):
        calls.append(1)
        return real(self, model) if len(calls) == 1 else LMMetrics(math.nan, math.nan, 1)

    monkeypatch.setattr(lm_fit.LanguageModel, "validate", validate)
    out = tmp_path / "run"
    assert main(["lm", "train", "--text", str(text), "--out", str(out), *TINY,
                 "--max-steps", "4", "--valid-every", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "error: the run diverged: validation loss nan at step 4, not saved" in err, err
    assert load_lm_checkpoint(out).step == 2
