"""GPT-2-shaped LMs exported to GGUF (llama.cpp's gpt2 architecture): read back with the gguf
package's own reader (every tensor ours, exactly at float32, within float16's rounding and
q8_0's bound; the metadata and the tokenizer), and run by llama.cpp itself where
llama-cpp-python is installed (greedy tokens where our margin decides them, perplexity)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import assert_tokens_agree_where_decided
from interop.gguf_helpers import (
    PROMPTS,
    TEXT,
    bpe_tokenizer,
    greedy_with_margins,
    llama_cpp_greedy,
    llama_cpp_model,
    llama_cpp_nll,
    our_nll,
    q8_bound,
    read_back,
)

from decoderkit.base.errors import UsageError
from decoderkit.cli import main
from decoderkit.interop.gguf.export import export_gguf
from decoderkit.interop.gguf.writer import CONTROL, FILE, NORMAL, UNUSED
from decoderkit.interop.gpt.hf import export_transformers
from decoderkit.nn.lm.model import DecoderOnlyLM, LMConfig
from decoderkit.text.lm.tokenizer import END_OF_TEXT, LMTokenizer

V, CONTEXT = 320, 64  # the model's rows: the tokenizer's 300 and 20 unused
TEMPLATE = "{% for m in messages %}{{ m['content'] }}{{ eos_token }}{% endfor %}"


@pytest.fixture(scope="module")
def tokenizer():
    return bpe_tokenizer()


def model(tied: bool = True, seed: int = 0, **overrides) -> DecoderOnlyLM:
    """A random 2-layer GPT-2 (width 64: q8_0's blocks of 32 divide its rows), every
    parameter N(0, 0.3^2): LayerNorms and biases off their init, decided greedy steps."""
    config = LMConfig(vocab_size=V, n_layers=2, d_model=64, n_heads=4, d_ff=128,
                      max_len=CONTEXT, dropout=0.0, tie_head=tied, **overrides)
    lm = DecoderOnlyLM(config)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in lm.parameters():
            p.copy_(0.3 * torch.randn(p.shape, generator=g))
    return lm.eval()


def ours(lm: DecoderOnlyLM) -> dict[str, np.ndarray]:
    """Our tensors under the names GGUF's gpt2 architecture gives them."""
    s = {k: v.numpy() for k, v in lm.state_dict().items()}
    names = {"embed.lut.weight": "token_embd.weight", "pos.table.weight": "position_embd.weight",
             "blocks.norm.weight": "output_norm.weight", "blocks.norm.bias": "output_norm.bias",
             "generator.proj.weight": "output.weight"}
    for i in range(lm.config.n_layers):
        for mine, theirs in (("res1.norm", "attn_norm"), ("self_attn.in_proj", "attn_qkv"),
                             ("self_attn.out_proj", "attn_output"), ("res2.norm", "ffn_norm"),
                             ("ffn.w_1", "ffn_up"), ("ffn.w_2", "ffn_down")):
            for p in ("weight", "bias"):
                names[f"blocks.layers.{i}.{mine}.{p}"] = f"blk.{i}.{theirs}.{p}"
    want = {names[k]: v for k, v in s.items()}
    if lm.config.tie_head:
        want.pop("output.weight")
    return want


@pytest.mark.parametrize("tied", [True, False])
def test_float32_reads_back_as_ours_with_the_metadata(tmp_path, tokenizer, tied):
    lm = model(tied)
    out = export_gguf(lm, tokenizer, tmp_path / "out", chat_template=TEMPLATE)
    tensors, fields, types = read_back(out / FILE)
    want = ours(lm)
    assert sorted(tensors) == sorted(want)
    for name, value in want.items():
        assert types[name] == "F32" and np.array_equal(tensors[name], value), name
    assert fields["general.architecture"] == "gpt2"
    assert (fields["gpt2.context_length"], fields["gpt2.embedding_length"],
            fields["gpt2.feed_forward_length"], fields["gpt2.block_count"],
            fields["gpt2.attention.head_count"]) == (CONTEXT, 64, 128, 2, 4)
    assert fields["gpt2.attention.layer_norm_epsilon"] == pytest.approx(1e-5)
    vocab = tokenizer.hf.get_vocab()
    assert fields["tokenizer.ggml.model"] == "gpt2" and fields["tokenizer.ggml.pre"] == "gpt-2"
    assert fields["tokenizer.ggml.tokens"] == sorted(vocab, key=vocab.get) + [
        f"[PAD{i}]" for i in range(300, V)]
    eot = vocab[END_OF_TEXT]
    assert fields["tokenizer.ggml.token_type"] == [
        CONTROL if i == eot else NORMAL for i in range(300)] + [UNUSED] * 20
    merges = tokenizer.hf.to_str()
    assert len(fields["tokenizer.ggml.merges"]) == 300 - 256 - 1 and all(
        f'"{a}","{b}"' in merges.replace(" ", "") for a, b in
        (m.split(" ") for m in fields["tokenizer.ggml.merges"]))
    assert fields["tokenizer.ggml.bos_token_id"] == fields["tokenizer.ggml.eos_token_id"] == eot
    assert fields["tokenizer.ggml.add_bos_token"] is False
    assert fields["tokenizer.chat_template"] == TEMPLATE


@pytest.mark.parametrize("kind", ["float16", "q8_0"])
def test_float16_and_q8_0_read_back_within_their_rounding(tmp_path, tokenizer, kind):
    lm = model(tied=False)
    out = export_gguf(lm, tokenizer, tmp_path / "out", kind=kind)
    tensors, fields, types = read_back(out / FILE)
    assert fields["general.file_type"] == {"float16": 1, "q8_0": 7}[kind]
    for name, value in ours(lm).items():
        if value.ndim == 1:  # norms and biases stay float32
            assert types[name] == "F32" and np.array_equal(tensors[name], value), name
        elif kind == "float16":
            assert types[name] == "F16", name
            assert np.array_equal(tensors[name], value.astype(np.float16).astype(np.float32))
        else:
            assert types[name] == "Q8_0", name
            error = np.abs(tensors[name] - value)
            assert (error <= q8_bound(value)).all() and error.max() > 0, name


def test_what_gguf_cannot_hold_is_refused(tmp_path, tokenizer):
    with pytest.raises(UsageError, match="norm_first=False"):
        export_gguf(model(norm_first=False), tokenizer, tmp_path / "a")
    with pytest.raises(UsageError, match="gpt2 architecture cannot express activation='relu'"):
        export_gguf(model(activation="relu"), tokenizer, tmp_path / "b")
    chars = LMTokenizer.characters("abc")
    with pytest.raises(UsageError, match="needs a BPE tokenizer.*character"):
        export_gguf(model(), chars, tmp_path / "c")
    with pytest.raises(UsageError, match=r"--type must be one of .*'q4_0'"):
        export_gguf(model(), tokenizer, tmp_path / "d", kind="q4_0")
    assert not any(tmp_path.iterdir())  # nothing written, no temporary left


def test_cli_exports_and_refuses_an_out_holding_a_users_file(tmp_path, tokenizer, capsys):
    hf = export_transformers(model(), tokenizer, tmp_path / "hf")
    (tmp_path / "hf" / "chat_template.jinja").write_text(TEMPLATE)
    out = tmp_path / "gguf"
    args = ["lm", "export", "--to", "gguf", "--type", "q8_0", "--checkpoint", str(hf),
            "--out", str(out)]
    assert main(args) == 0
    assert "llama.cpp" in capsys.readouterr().out
    _, fields, types = read_back(out / FILE)
    assert types["blk.0.attn_qkv.weight"] == "Q8_0"
    assert fields["tokenizer.chat_template"] == TEMPLATE
    assert main(args) == 2 and "pass --overwrite" in capsys.readouterr().err
    (out / "notes.txt").write_text("mine")
    assert main(args + ["--overwrite"]) == 2
    assert "notes.txt" in capsys.readouterr().err and (out / "notes.txt").exists()
    assert main(["lm", "export", "--to", "transformers", "--type", "q8_0", "--checkpoint",
                 str(hf), "--out", str(tmp_path / "t")]) == 2
    assert "--type is for --to gguf" in capsys.readouterr().err


@pytest.mark.parametrize("tied", [True, False])
def test_llama_cpp_greedy_equals_ours_at_float32(tmp_path, tokenizer, tied):
    lm = model(tied, seed=1)
    out = export_gguf(lm, tokenizer, tmp_path / "out")
    llm = llama_cpp_model(out / FILE, CONTEXT)
    want, margins = greedy_with_margins(lm, PROMPTS, 16)
    got = [llama_cpp_greedy(llm, p, 16) for p in PROMPTS]
    assert_tokens_agree_where_decided(want, got, margins, GGML_BOUND, at_least=2)


# llama.cpp's float32 CPU kernels against ours (its GELU reads a float16 table): measured on
# these models, log-probabilities within 1.3e-3 of ours over a 64-token text (seeds 1-3, tied
# and untied); the perplexity at q8_0 0.997-0.999 of ours
GGML_BOUND = 2e-3


def test_llama_cpp_perplexity_at_q8_0_within_one_percent_of_ours(tmp_path, tokenizer):
    lm = model(seed=2)
    out = export_gguf(lm, tokenizer, tmp_path / "out", kind="q8_0")
    llm = llama_cpp_model(out / FILE, CONTEXT)
    ids = tokenizer.encode(" ".join(TEXT[:4]))[:CONTEXT]
    assert np.exp(llama_cpp_nll(llm, ids)) == pytest.approx(np.exp(our_nll(lm, ids)), rel=0.01)
