"""The training run end to end: loss falls, checkpoints load, a killed run resumes exactly,
and user mistakes are one clear line (exit 2) that overwrites nothing."""

import os
import signal
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file

from decoderkit.cli import main
from decoderkit.nn.seq2seq.model import ModelConfig
from decoderkit.training.seq2seq.checkpoint import load_checkpoint
from decoderkit.training.seq2seq.fit import DataConfig, TrainConfig, fit, prepare_data

# Runs `decoderkit ARGS...` but SIGKILLs itself right after the checkpoint of step STEP is
# saved: a crash at a known point, with no hook in the library. argv: STEP ARGS...
KILL_AFTER_SAVE = """
import os, signal, sys
from decoderkit.cli import main
from decoderkit.training.seq2seq import fit
real_save = fit.save_checkpoint
def save_then_die(*args, step, **kwargs):
    real_save(*args, step=step, **kwargs)
    if step == int(sys.argv[1]):
        os.kill(os.getpid(), signal.SIGKILL)
fit.save_checkpoint = save_then_die
sys.exit(main(sys.argv[2:]))
"""

TINY = ["--layers", "1", "--d-model", "16", "--heads", "2", "--d-ff", "32", "--max-len", "40",
        "--batch-size", "16", "--train-size", "160", "--valid-size", "8", "--warmup", "2",
        "--quiet", "--show", "0"]


def test_fit_learns_and_saves_a_loadable_checkpoint(tmp_path, capsys):
    data = prepare_data(DataConfig(task="copy", train_size=256, valid_size=16, seed=1))
    config = ModelConfig(data.src_tokenizer.vocab_size, data.tgt_tokenizer.vocab_size, 1, 32,
                         2, 64, 0.0, max_len=40)
    cfg = TrainConfig(batch_size=32, max_steps=60, warmup=20, lr_factor=0.1, valid_every=20)
    result = fit(config, cfg, data, tmp_path / "run", progress=False, show=3)
    ckpt = load_checkpoint(tmp_path / "run")
    history = ckpt.meta["history"]
    assert [h["step"] for h in history] == [20, 40, 60] and ckpt.step == 60
    assert history[2]["loss"] < history[1]["loss"] < history[0]["loss"]
    assert history[2]["loss"] < 0.9 * history[0]["loss"]
    assert result.metrics.loss == pytest.approx(history[-1]["loss"]) and result.step == 60
    assert all(torch.equal(a, b) for a, b in zip(result.model.state_dict().values(),
                                                 ckpt.model.state_dict().values(), strict=True))
    assert ckpt.meta["data"]["task"] == "copy" and ckpt.trainer_state()["optimizer"]["state"]
    out = capsys.readouterr().out
    assert "Held-out translations after 60 steps" in out and f"Checkpoint: {tmp_path}" in out
    # target_exact / patience stop early, at a validation
    cfg = TrainConfig(batch_size=32, max_steps=60, warmup=20, valid_every=10, target_exact=0.0)
    fit(config, cfg, data, tmp_path / "early", progress=False, show=0)
    assert load_checkpoint(tmp_path / "early").meta["stop_reason"] == "target exact match"


def test_moving_average_is_the_average_of_the_trained_weights(tmp_path, monkeypatch):
    """--ema d: the checkpoint holds w_avg(1) = w(1), w_avg(t) = d_t w_avg(t-1) + (1 - d_t) w(t)
    with d_t = min(d, t / (t + 9)), computed here in float64 from the weights a run without it
    saved at every step (the average never changes what is trained)."""
    from decoderkit.training.seq2seq import fit as fit_module

    data = prepare_data(DataConfig(task="copy", train_size=128, valid_size=8, seed=1))
    config = ModelConfig(data.src_tokenizer.vocab_size, data.tgt_tokenizer.vocab_size, 1, 16,
                         2, 32, 0.0, max_len=40, tie_generator=True)
    seen, real_save = [], fit_module.save_checkpoint

    def recording(out, model, *args, **kwargs):
        seen.append({k: v.double() for k, v in model.state_dict().items()})
        return real_save(out, model, *args, **kwargs)

    monkeypatch.setattr(fit_module, "save_checkpoint", recording)
    fit(config, TrainConfig(batch_size=16, max_steps=6, warmup=4, valid_every=1), data,
        tmp_path / "every", progress=False, show=0)
    fit(config, TrainConfig(batch_size=16, max_steps=6, warmup=4, valid_every=6, ema=0.3),
        data, tmp_path / "ema", progress=False, show=0)
    expected = seen[0]
    for t, trained in enumerate(seen[1:6], 2):
        d = min(0.3, t / (t + 9))  # the cap binds from step 4 on
        expected = {k: d * expected[k] + (1 - d) * trained[k] for k in expected}
    got = load_checkpoint(tmp_path / "ema").model.state_dict()
    moved = [k for k in expected if not torch.equal(seen[0][k], seen[5][k])]
    assert len(moved) > 10  # the weights did train
    for k in moved:
        torch.testing.assert_close(got[k].double(), expected[k], rtol=1e-5, atol=1e-6)
    assert got["generator.proj.weight"].data_ptr() == got["tgt_embed.lut.weight"].data_ptr()
    trained = load_checkpoint(tmp_path / "ema").trainer_state()["ema"]
    assert trained["n_averaged"] == 6 and all(
        torch.equal(trained["trained"][k].double(), seen[5][k]) for k in moved)


def _reverse_args(out, *extra):
    return ["train", "--task", "reverse", "--out", str(out), "--max-steps", "12",
            "--valid-every", "4", "--dropout", "0.1", *TINY, *extra]


@pytest.fixture()
def one_thread():
    """Bit-exact float results need a fixed thread count: BLAS may otherwise pick fewer
    threads (a different summation order) when the machine is busy."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    torch.set_num_threads(threads)


@pytest.mark.parametrize("ema", [(), ("--ema", "0.9")], ids=["weights", "moving-average"])
def test_killed_run_resumes_to_bit_identical_weights(tmp_path, one_thread, ema):
    assert main(_reverse_args(tmp_path / "whole", *ema)) == 0
    killed = subprocess.run([sys.executable, "-c", KILL_AFTER_SAVE, "8",
                             *_reverse_args(tmp_path / "cut", *ema)],
                            capture_output=True, text=True, timeout=300, env=one_thread)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert load_checkpoint(tmp_path / "cut").step == 8
    assert main(_reverse_args(tmp_path / "cut", "--resume", *ema)) == 0
    a = load_file(tmp_path / "whole" / "model.safetensors")
    b = load_file(tmp_path / "cut" / "model.safetensors")
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert load_checkpoint(tmp_path / "cut").meta["history"] == \
        load_checkpoint(tmp_path / "whole").meta["history"]


def _cli_error(capsys, *argv):
    assert main(list(argv)) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    return err


def test_user_mistakes_are_one_line_and_overwrite_nothing(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["train", "--task", "copy", "--out", str(run), "--max-steps", "2",
                 "--valid-every", "2", *TINY]) == 0
    before = (run / "model.safetensors").read_bytes()
    assert "already holds a checkpoint" in _cli_error(
        capsys, "train", "--task", "copy", "--out", str(run), *TINY)
    err = _cli_error(capsys, "train", "--task", "copy", "--out", str(run), "--resume",
                     *TINY, "--d-model", "32")
    assert "'d_model' is 32 here but 16" in err
    assert (run / "model.safetensors").read_bytes() == before
    assert "unknown task 'dats'" in _cli_error(capsys, "train", "--task", "dats",
                                               "--out", str(tmp_path / "x"), *TINY)
    bad = tmp_path / "bad.tsv"
    bad.write_text("one\tun\ntwo deux\n")
    assert f"{bad}:2: no TAB" in _cli_error(capsys, "train", "--data", str(bad), "--out",
                                            str(tmp_path / "b"), *TINY)  # not runs/ in cwd
    assert "no checkpoint in" in _cli_error(capsys, "train", "--task", "copy", "--resume",
                                            "--out", str(tmp_path / "none"), *TINY)
    assert "no checkpoint in" in _cli_error(capsys, "eval", "--checkpoint", str(tmp_path / "y"))


def test_corpus_training_with_bpe_and_eval_command(tmp_path, capsys):
    corpus = tmp_path / "pairs.tsv"
    words = ["cat", "dog", "bird", "fish", "cow"]
    corpus.write_text("".join(f"the {a} sees a {b}\tle {b} voit un {a}\n"
                              for a in words for b in words))
    run = tmp_path / "run"
    assert main(["train", "--data", str(corpus), "--out", str(run), "--max-steps", "4",
                 "--valid-every", "4", "--vocab-size", "40", *TINY]) == 0
    ckpt = load_checkpoint(run)
    assert ckpt.src_tokenizer.decode(ckpt.src_tokenizer.encode("the cat")) == "the cat"
    assert (run / "src_tokenizer.json").exists() and ckpt.config.src_vocab <= 40
    capsys.readouterr()
    assert main(["eval", "--checkpoint", str(run)]) == 0
    assert "2 pairs | loss" in capsys.readouterr().out  # 25 pairs -> 10% held out
    assert main(["eval", "--checkpoint", str(run), "--data", str(corpus)]) == 0
    assert "25 pairs | loss" in capsys.readouterr().out
    # the same corpus as two line-aligned files gives the same split and tokenizers
    lines = corpus.read_text().splitlines()
    (tmp_path / "en.txt").write_text("\n".join(line.split("\t")[0] for line in lines))
    (tmp_path / "fr.txt").write_text("\n".join(line.split("\t")[1] for line in lines))
    threads = torch.get_num_threads()
    try:
        assert main(["train", "--src", str(tmp_path / "en.txt"), "--tgt",
                     str(tmp_path / "fr.txt"), "--out", str(tmp_path / "two"), "--max-steps",
                     "4", "--valid-every", "4", "--vocab-size", "40", "--threads", "1",
                     *TINY]) == 0
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(threads)
    two = load_checkpoint(tmp_path / "two")
    assert two.tgt_tokenizer.hf.to_str() == ckpt.tgt_tokenizer.hf.to_str()
    assert "--src and --tgt go together" in _cli_error(capsys, "train", "--src", "a.txt", *TINY)


def test_a_model_starting_from_pad_keeps_each_sides_own_start_row():
    """Marian's separate vocabularies of different sizes: the target's start row (pad_id), the
    source's (src_pad_id) and the output layer's row and bias of pad_id get no gradient,
    every other row does."""
    from decoderkit.nn.seq2seq.model import EncoderDecoder
    from decoderkit.training.seq2seq.fit import keep_start_row

    c = ModelConfig(src_vocab=9, tgt_vocab=11, n_layers=1, d_model=8, n_heads=2, d_ff=16,
                    pad_id=10, bos_id=10, src_pad_id=8)
    model = EncoderDecoder(c)
    keep_start_row(model)
    src, tgt = torch.arange(9)[None], torch.arange(11)[None]
    model.generator(model(src, tgt)).sum().backward()
    g = model.generator.proj
    for weight, row in ((model.src_embed.lut.weight, 8), (model.tgt_embed.lut.weight, 10),
                        (g.weight, 10), (g.bias, 10)):
        rows = weight.grad.abs().reshape(len(weight), -1).sum(1)
        assert rows[row] == 0 and bool((rows[:row] > 0).all())
