"""``decoderkit lm``: train learns and resumes bit-exact, sample streams what generate gives,
eval agrees with the run's own validation, and bad input is one line, exit 2, nothing written
outside --out."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from decoderkit.cli import main
from decoderkit.training.lm.checkpoint import load_lm_checkpoint

HAMLET = Path(__file__).parents[1] / "fixtures" / "shakespeare_hamlet.txt"
TINY = ["--layers", "1", "--d-model", "32", "--heads", "2", "--block-size", "16",
        "--batch-size", "8", "--warmup", "2", "--eval-blocks", "16", "--quiet"]

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


@pytest.fixture(scope="module")
def text(tmp_path_factory):
    path = tmp_path_factory.mktemp("text") / "hamlet.txt"
    path.write_text(HAMLET.read_text()[:30000])
    return path


def one_line(capsys, argv) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


def test_train_learns_and_keeps_the_best_validation(text, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["lm", "train", "--text", str(text), "--out", str(out), *TINY,
                 "--max-steps", "60", "--eval-every", "20", "--lr", "3e-3"]) == 0
    model, tok, meta = load_lm_checkpoint(out)
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
    assert load_lm_checkpoint(tmp_path / "cut")[2]["step"] == 8
    assert main(args(tmp_path / "cut", "--resume")) == 0
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
    assert "no such file (--text)" in train(tmp_path / "missing.txt")
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


@pytest.fixture(scope="module")
def run(text, tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "run"
    assert main(["lm", "train", "--text", str(text), "--out", str(out), *TINY,
                 "--max-steps", "30", "--eval-every", "30", "--eval-blocks", "100000"]) == 0
    return out


def recompute_greedy(model, ids: list[int], n: int) -> list[int]:
    """n greedy tokens, each from a full forward over the last max_len tokens (no cache)."""
    ids = list(ids)
    with torch.no_grad():
        for _ in range(n):
            window = torch.tensor([ids[-model.config.max_len:]])
            ids.append(int(model(window)[0, -1].argmax()))
    return ids[-n:]


def test_sample_prints_the_prompt_and_what_generate_gives(run, capsys):
    model, tok, _ = load_lm_checkpoint(run)
    prompt = "HAMLET."  # 7 tokens, + 30 new > the 16-token context: the sliding window
    assert main(["lm", "sample", "--checkpoint", str(run), "--prompt", prompt, "--greedy",
                 "--max-new-tokens", "30"]) == 0
    expected = tok.decode(recompute_greedy(model, tok.encode(prompt), 30))
    assert capsys.readouterr().out == f"{prompt}{expected}\n"
    assert main(["lm", "sample", "--checkpoint", str(run), "--prompt", prompt, "--seed", "3",
                 "--num-samples", "3", "--max-new-tokens", "12", "--top-k", "5"]) == 0
    printed = capsys.readouterr().out
    again = [main(["lm", "sample", "--checkpoint", str(run), "--prompt", prompt, "--seed", "3",
                   "--num-samples", "3", "--max-new-tokens", "12", "--top-k", "5"]),
             capsys.readouterr().out]
    assert again == [0, printed]  # the seed fixes every sample
    assert printed.count("--- sample") == 2 and printed.count(prompt) == 3


def test_sample_refuses_what_it_cannot_encode(run, capsys):
    err = one_line(capsys, ["lm", "sample", "--checkpoint", str(run), "--prompt",
                            "Hamlet \u00e9\u00e9 \U0001f642"])
    assert "2 character(s) not in the model's character vocabulary: '\u00e9' '\U0001f642'" in err
    assert "no such file" in one_line(capsys, ["lm", "sample", "--checkpoint",
                                               str(run.parent / "missing"), "--prompt", "a"])
    assert "--greedy takes no" in one_line(capsys, ["lm", "sample", "--checkpoint", str(run),
                                                    "--prompt", "a", "--greedy", "--top-k", "3"])
    # a temperature the model's float32 cannot hold: refused before anything is printed
    assert main(["lm", "sample", "--checkpoint", str(run), "--prompt", "HAMLET.",
                 "--temperature", "1e-320"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "temperature must be a finite number" in err


def test_sample_int8_gives_what_generate_gives_on_the_int8_copy(run, capsys, monkeypatch):
    from decoderkit.generation import int8
    from decoderkit.generation.lm import generate

    if not int8.int8_available():
        pytest.skip("no fbgemm int8 engine")
    model, tok, _ = load_lm_checkpoint(run)
    prompt = "HAMLET."
    assert main(["lm", "sample", "--checkpoint", str(run), "--prompt", prompt, "--greedy",
                 "--int8", "--max-new-tokens", "12"]) == 0
    expected = generate(int8.quantize_int8(model), [tok.encode(prompt)], max_new_tokens=12,
                        greedy=True)[0]
    assert capsys.readouterr().out == f"{prompt}{tok.decode(expected)}\n"
    monkeypatch.setattr(int8, "int8_available", lambda: False)  # a build without fbgemm
    assert "int8 needs PyTorch's fbgemm engine" in one_line(
        capsys, ["lm", "sample", "--checkpoint", str(run), "--prompt", "a", "--int8"])


def test_eval_equals_the_runs_own_validation_and_a_direct_computation(run, text, tmp_path,
                                                                       capsys):
    from decoderkit.training.lm.data import held_out_at

    model, tok, meta = load_lm_checkpoint(run)
    whole = text.read_text()
    held = tmp_path / "held.txt"
    held.write_text(whole[held_out_at(whole):])  # what lm train held out
    assert main(["lm", "eval", "--checkpoint", str(run), "--text", str(held)]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith(f"loss {meta['history'][-1]['loss']:.4f} | perplexity")
    ids = torch.tensor(tok.encode(held.read_text()))
    n = (len(ids) - 1) // 16  # consecutive blocks of 16 inputs
    inputs = torch.stack([ids[16 * i: 16 * i + 16] for i in range(n)])
    labels = torch.stack([ids[16 * i + 1: 16 * i + 17] for i in range(n)])
    with torch.no_grad():
        logp = torch.log_softmax(model(inputs).double(), -1)
    loss = -logp.gather(-1, labels[..., None]).mean()
    assert f"loss {float(loss):.4f} | perplexity {float(loss.exp()):.2f} | {16 * n:,} tokens" \
        in printed
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"To be\xff")
    assert one_line(capsys, ["lm", "eval", "--checkpoint", str(run), "--text", str(bad)]) == \
        f"decoderkit lm: error: {bad}: not UTF-8 (byte 0xff at byte offset 5)"
    assert "exceeds the model's context length 16" in one_line(
        capsys, ["lm", "eval", "--checkpoint", str(run), "--text", str(held), "--block-size",
                 "17"])


def test_export_to_transformers_gives_the_same_logits(run, tmp_path, capsys):
    transformers = pytest.importorskip("transformers")
    assert main(["lm", "export", "--to", "transformers", "--checkpoint", str(run), "--out",
                 str(tmp_path / "hf")]) == 0
    ours, tok, _ = load_lm_checkpoint(run)
    theirs = transformers.GPT2LMHeadModel.from_pretrained(tmp_path / "hf").eval()
    ids = torch.tensor([tok.encode("To be, or not to be")[:16]])
    with torch.no_grad():
        assert torch.allclose(ours(ids), theirs(ids).logits, atol=1e-5)


def test_model_flags_over_a_preset_and_the_default_shape():
    from decoderkit.cli import build_parser
    from decoderkit.cli.lm import _model_config

    def config(*flags):
        return _model_config(build_parser().parse_args(
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
