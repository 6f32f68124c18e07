"""``decoderkit lm eval``: equals the run's own validation and a direct float64 computation;
a bad file or block size is one line; a device or a pipe as --text is refused unread; a
Hugging Face directory's text scored as transformers does (its tokenizer(text): a Llama
tokenizer's BOS first), on tiny random Llama directories built and saved by transformers."""

import os

import pytest
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


HF_TEXT = "To be, or not to be, that is the question. All that glitters is not gold. " * 3
ROUNDED = 0.5e-4 + 1e-5  # the printed loss's 4 decimals, and float32 against transformers'


def llama_directory(path, bos: bool):
    """A llama directory whose tokenizer puts <s> first (Llama's post-processor) or adds
    nothing; returns transformers' (tokenizer, model) read back from it."""
    from tokenizers import processors

    transformers = pytest.importorskip("transformers")
    from interop.llama_helpers import save_hf
    from text.lm.chat_dirs import chat_tokenizer

    hf = chat_tokenizer().hf
    if bos:
        hf.post_processor = processors.TemplateProcessing(
            single="<s> $A", special_tokens=[("<s>", hf.token_to_id("<s>"))])
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=hf, bos_token="<s>",
                                                eos_token="</s>")
    fast.save_pretrained(path)
    save_hf("llama-gqa", path, vocab_size=len(fast))
    return (transformers.AutoTokenizer.from_pretrained(path),
            transformers.AutoModelForCausalLM.from_pretrained(path).eval())


def printed_loss(capsys, args) -> tuple[float, list[str]]:
    assert main(["lm", "eval", *args]) == 0
    lines = capsys.readouterr().out.splitlines()
    return float(lines[0].split()[1]), lines


@pytest.mark.parametrize("bos", [True, False], ids=["bos", "none"])
def test_eval_equals_transformers_tokenizer_and_loss(tmp_path, capsys, bos):
    """One block: transformers' ``model(**tokenizer(text), labels=input_ids).loss``; three
    blocks of 32: its per-token losses over consecutive windows of its own ids (BOS only in
    the first). The BOS is named in the output; without one, no line says so."""
    pytest.importorskip("transformers")
    tokenizer, model = llama_directory(tmp_path, bos)
    enc = tokenizer(HF_TEXT[:120], return_tensors="pt")
    ids = enc.input_ids[0]
    assert (ids[0] == tokenizer.bos_token_id) == bos and len(ids) <= 64
    with torch.no_grad():
        want = float(model(**enc, labels=enc.input_ids).loss)
    (tmp_path / "one.txt").write_text(HF_TEXT[:120])
    got, lines = printed_loss(capsys, ["--checkpoint", str(tmp_path), "--text",
                                       str(tmp_path / "one.txt"), "--block-size",
                                       str(len(ids) - 1)])
    assert abs(got - want) <= ROUNDED
    assert lines[0].endswith(f"{len(ids) - 1:,} tokens in blocks of {len(ids) - 1}")
    named = "the text scored as transformers' tokenizer(text) encodes it: <s> first"
    assert any(line.startswith(named) for line in lines) == bos
    ids = tokenizer(HF_TEXT).input_ids
    n = (len(ids) - 1) // 32  # whole blocks of 32 predicted tokens (the tail is left out)
    assert n == 3
    with torch.no_grad():
        windows = torch.tensor([ids[32 * i: 32 * i + 33] for i in range(n)])  # (n, 33)
        logp = model(windows[:, :-1]).logits.double().log_softmax(-1)
    want = float(-logp.gather(-1, windows[:, 1:, None]).mean())
    (tmp_path / "three.txt").write_text(HF_TEXT)
    got, _ = printed_loss(capsys, ["--checkpoint", str(tmp_path), "--text",
                                   str(tmp_path / "three.txt"), "--block-size", "32"])
    assert abs(got - want) <= ROUNDED
