"""``decoderkit lm sample``: prints the prompt and what generate gives (float and int8), and
refuses what it cannot encode in one line."""

import pytest
import torch

from cli.lm.helpers import one_line
from decoderkit.cli import main
from decoderkit.training.lm.checkpoint import load_lm_checkpoint


def recompute_greedy(model, ids: list[int], n: int, vocab: int | None = None) -> list[int]:
    """n greedy tokens, each from a full forward over the last max_len tokens (no cache),
    among the first ``vocab`` ids (None: all)."""
    ids = list(ids)
    with torch.no_grad():
        for _ in range(n):
            window = torch.tensor([ids[-model.config.max_len:]])
            ids.append(int(model(window)[0, -1, :vocab].argmax()))
    return ids[-n:]


def test_sample_prints_the_prompt_and_what_generate_gives(run, capsys):
    ckpt = load_lm_checkpoint(run)
    model, tok = ckpt.model, ckpt.tokenizer
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
    from decoderkit.generation.lm.complete import generate

    if not int8.int8_available():
        pytest.skip("no fbgemm int8 engine")
    ckpt = load_lm_checkpoint(run)
    model, tok = ckpt.model, ckpt.tokenizer
    prompt = "HAMLET."
    assert main(["lm", "sample", "--checkpoint", str(run), "--prompt", prompt, "--greedy",
                 "--int8", "--max-new-tokens", "12"]) == 0
    expected = generate(int8.quantize_int8(model), [tok.encode(prompt)], max_new_tokens=12,
                        greedy=True)[0]
    assert capsys.readouterr().out == f"{prompt}{tok.decode(expected)}\n"
    monkeypatch.setattr(int8, "int8_available", lambda: False)  # a build without fbgemm
    assert "int8 needs PyTorch's fbgemm engine" in one_line(
        capsys, ["lm", "sample", "--checkpoint", str(run), "--prompt", "a", "--int8"])


def test_sample_compile_gives_the_eager_tokens(run, capsys):
    ckpt = load_lm_checkpoint(run)
    model, tok = ckpt.model, ckpt.tokenizer
    prompt = "HAMLET."  # 7 tokens + 8 new: within the 16-token context, decode steps only
    assert main(["lm", "sample", "--checkpoint", str(run), "--prompt", prompt, "--greedy",
                 "--compile", "--max-new-tokens", "8"]) == 0
    expected = tok.decode(recompute_greedy(model, tok.encode(prompt), 8))
    assert capsys.readouterr().out == f"{prompt}{expected}\n"
    assert "--autotune needs --compile" in one_line(
        capsys, ["lm", "sample", "--checkpoint", str(run), "--prompt", "a", "--autotune"])


def test_sample_dtype_bfloat16_gives_the_bfloat16_copys_tokens(run, capsys, monkeypatch,
                                                               tmp_path):
    from decoderkit.generation.bfloat16 import to_bfloat16
    from decoderkit.generation.lm.complete import generate

    monkeypatch.setattr("decoderkit.generation.bfloat16.native_bf16", lambda: True)
    ckpt = load_lm_checkpoint(run)
    model, tok = ckpt.model, ckpt.tokenizer
    prompt = "HAMLET."
    assert main(["lm", "sample", "--checkpoint", str(run), "--prompt", prompt, "--greedy",
                 "--dtype", "bfloat16", "--max-new-tokens", "8"]) == 0
    expected = generate(to_bfloat16(model), [tok.encode(prompt)], max_new_tokens=8,
                        greedy=True)[0]
    assert capsys.readouterr().out == f"{prompt}{tok.decode(expected)}\n"
    assert "--compile-cache needs --compile" in one_line(
        capsys, ["lm", "sample", "--checkpoint", str(run), "--prompt", "a", "--compile-cache",
                 str(tmp_path)])
    monkeypatch.setattr("decoderkit.generation.bfloat16.native_bf16", lambda: False)
    assert "--dtype bfloat16 needs a CPU with native bfloat16" in one_line(
        capsys, ["lm", "sample", "--checkpoint", str(run), "--prompt", "a", "--dtype",
                 "bfloat16"])


def test_sample_stop_ends_the_text_before_the_stop(run, capsys):
    ckpt = load_lm_checkpoint(run)
    model, tok = ckpt.model, ckpt.tokenizer
    prompt = "HAMLET."
    free = tok.decode(recompute_greedy(model, tok.encode(prompt), 30))
    stop = free[5:8]  # three characters: three tokens of this character model
    assert main(["lm", "sample", "--checkpoint", str(run), "--prompt", prompt, "--greedy",
                 "--max-new-tokens", "30", "--stop", stop, "--stop", "\u00a7never"]) == 0
    assert capsys.readouterr().out == f"{prompt}{free[:free.index(stop)]}\n"
    assert "--stop must be a non-empty text" in one_line(
        capsys, ["lm", "sample", "--checkpoint", str(run), "--prompt", "a", "--stop", ""])


def test_a_directorys_generation_defaults_apply_where_no_flag_is_given(tmp_path, capsys):
    pytest.importorskip("transformers")
    from decoderkit.generation.lm.complete import generate
    from decoderkit.interop.checkpoints import load_checkpoint
    from interop.lm.test_directory import directory

    path = directory(tmp_path, do_sample=True, temperature=0.6, top_k=20, max_new_tokens=7)
    ckpt = load_checkpoint(path)
    ids, tok = ckpt.tokenizer.encode_prompt("the cat"), ckpt.tokenizer
    capsys.readouterr()  # transformers' progress bars
    base = ["lm", "sample", "--checkpoint", str(path), "--prompt", "the cat", "--seed", "5"]
    note = " (from generation_config.json)"
    for flags, settings, notes in (
            ([], dict(temperature=0.6, top_k=20, max_new_tokens=7),
             ["greedy off (do_sample true)", "max_new_tokens 7", "temperature 0.6",
              "top_k 20"]),
            (["--temperature", "1.5", "--max-new-tokens", "3"],
             dict(temperature=1.5, top_k=20, max_new_tokens=3), ["top_k 20"]),
            (["--greedy"], dict(greedy=True, max_new_tokens=7), ["max_new_tokens 7"])):
        assert main(base + flags) == 0
        out, err = capsys.readouterr()
        want = generate(ckpt.model, [ids], seed=5, **settings)[0]
        assert out == "the cat" + tok.decode(want) + "\n", flags
        assert err == "decoderkit lm sample: " + "; ".join(n + note for n in notes) + "\n"
    assert main(["lm", "sample", "--help"]) == 0
    assert "(default: the checkpoint's generation_config.json, else 1.0)" in \
        " ".join(capsys.readouterr().out.split())


def test_sample_opens_a_hugging_face_llama_directory(tmp_path, capsys):
    """A Llama-family directory (tiny, random, built by transformers) through the opener."""
    pytest.importorskip("transformers")
    from decoderkit.generation.lm.complete import generate
    from decoderkit.interop.llama.hf import load_llama
    from decoderkit.text.lm.tokenizer import LMTokenizer
    from interop.llama_helpers import save_hf

    tok = LMTokenizer.characters("to be, or not to be: that is the question")
    save_hf("llama-gqa", tmp_path, vocab_size=tok.vocab_size)
    tok.save(tmp_path / "tokenizer.json")
    assert main(["lm", "sample", "--checkpoint", str(tmp_path), "--prompt", "to be",
                 "--greedy", "--max-new-tokens", "8"]) == 0
    ids = generate(load_llama(tmp_path)[0], [tok.encode("to be")], max_new_tokens=8,
                   greedy=True)[0]
    assert capsys.readouterr().out == f"to be{tok.decode(ids)}\n"


def test_a_padded_vocabulary_samples_only_the_tokenizers_ids(tmp_path, capsys):
    """A directory of more rows than tokens, its head rigged so a padded row wins every
    argmax: greedy is the argmax over the tokenizer's ids, and three draws print (a padded id
    would stop lm sample with "token id N is outside the vocabulary")."""
    pytest.importorskip("transformers")
    from decoderkit.generation.lm.complete import generate
    from decoderkit.interop.checkpoints import load_checkpoint
    from interop.llama_helpers import save_padded

    tok = save_padded(tmp_path)
    model = load_checkpoint(tmp_path).model
    base = ["lm", "sample", "--checkpoint", str(tmp_path), "--prompt", "to be",
            "--max-new-tokens", "12"]
    assert main(base + ["--greedy"]) == 0
    greedy = recompute_greedy(model, tok.encode("to be"), 12, tok.vocab_size)
    assert capsys.readouterr().out == f"to be{tok.decode(greedy)}\n"
    assert main(base + ["--seed", "4", "--num-samples", "3", "--temperature", "1.5"]) == 0
    drawn = generate(model, [tok.encode("to be")] * 3, max_new_tokens=12, seed=4,
                     temperature=1.5, vocab=tok.vocab_size)
    assert capsys.readouterr().out == "".join(
        (f"--- sample {i} ---\n" if i > 1 else "") + f"to be{tok.decode(ids)}\n"
        for i, ids in enumerate(drawn, 1))
