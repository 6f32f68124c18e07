"""``decoderkit lm eval``: equals the run's own validation and a direct float64 computation;
a bad file or block size is one line; a device or a pipe as --text is refused unread."""

import os

import torch

from cli.lm.helpers import TINY, one_line
from decoderkit.cli import main
from decoderkit.training.lm.checkpoint import load_lm_checkpoint


def test_eval_equals_the_runs_own_validation_and_a_direct_computation(run, text, tmp_path,
                                                                       capsys):
    from decoderkit.training.lm.data import held_out_at

    ckpt = load_lm_checkpoint(run)
    model, tok, meta = ckpt.model, ckpt.tokenizer, ckpt.meta
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
        f"decoderkit lm eval: error: {bad}: not UTF-8 (byte 0xff at byte offset 5)"
    assert "exceeds the model's context length 16" in one_line(
        capsys, ["lm", "eval", "--checkpoint", str(run), "--text", str(held), "--block-size",
                 "17"])


def test_a_device_or_a_pipe_as_text_is_refused_at_once(run, tmp_path, capsys):
    """/dev/zero was read forever (lm eval re-did the corpus reader without its file check)."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)  # reading it would wait for a writer forever
    for path, kind in (("/dev/zero", "is a character device"), (str(fifo), "is a named pipe")):
        line = one_line(capsys, ["lm", "eval", "--checkpoint", str(run), "--text", path])
        assert line == f"decoderkit lm eval: error: --text {path} {kind}, not a regular file"


def test_a_bpe_model_prints_its_loss_per_character_a_character_model_does_not(run, text,
                                                                             tmp_path, capsys):
    """The per-character figure (what a BPE model's loss is beside a character model's goal):
    the printed loss per token times the tokenizer's own tokens over the text's characters."""
    bpe = tmp_path / "bpe"
    assert main(["lm", "train", "--text", str(text), "--out", str(bpe), *TINY, "--tokenizer",
                 "bpe", "--vocab-size", "300", "--max-steps", "2", "--eval-every", "2"]) == 0
    held = tmp_path / "held.txt"
    held.write_text(text.read_text()[-3000:])
    capsys.readouterr()
    assert main(["lm", "eval", "--checkpoint", str(bpe), "--text", str(held)]) == 0
    first, second = capsys.readouterr().out.splitlines()
    loss = float(first.split()[1])
    whole = held.read_text()
    chars, tokens = len(whole), len(load_lm_checkpoint(bpe).tokenizer.encode(whole))
    assert tokens < chars  # word pieces, not characters
    shown, rest = second.removeprefix("loss per character ").split(" ", 1)
    assert abs(float(shown) - loss * tokens / chars) < 1e-4  # the loss printed is rounded
    assert rest == f"({chars:,} characters, {chars / tokens:.2f} a token)"
    assert main(["lm", "eval", "--checkpoint", str(run), "--text", str(held)]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 1  # characters: the loss is per character
