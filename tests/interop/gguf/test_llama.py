"""Llama-family LMs exported to GGUF (llama.cpp's llama, qwen2 and qwen3 architectures): read
back with the gguf package's reader (every tensor Hugging Face's: a Llama's q and k un-permuted
from GGUF's interleaved pairs, Qwen's as transformers' own tiny random Qwen2 / Qwen3 has them;
RoPE, grouped-query heads, the head width, RMSNorm epsilon) and run by llama.cpp where
llama-cpp-python is installed: greedy tokens where our margin decides them at float32, the
perplexity at q8_0 within 1% of ours."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import assert_tokens_agree_where_decided
from interop import gguf_helpers as h

from decoderkit.base.errors import UsageError
from decoderkit.interop.gguf.export import export_gguf
from decoderkit.interop.gguf.llama import to_rotate_half
from decoderkit.interop.gguf.writer import FILE
from decoderkit.interop.llama.hf import load_llama
from decoderkit.interop.llama.hf_export import hf_tensors

V, CONTEXT, HEADS, KV_HEADS = h.V, h.CONTEXT, h.HEADS, h.KV_HEADS
# llama.cpp's float32 kernels (its key/value cache at float32 too) against ours: measured on
# these models, log-probabilities within 9.9e-5 of ours over a 64-token text (seeds 1 and 2,
# tied and untied; Qwen2 and Qwen3, seeds 0-2: 5.5e-6); the q/k rows left unpermuted: 15.3
# (Qwen's permuted as a Llama's: its perplexity moved by 5-10%)
GGML_BOUND = 2e-4


@pytest.fixture(scope="module")
def tokenizer():
    return h.bpe_tokenizer()


@pytest.mark.parametrize("tied", [True, False])
def test_float32_reads_back_as_hugging_faces_tensors_with_the_metadata(tmp_path, tokenizer,
                                                                       tied):
    lm = h.llama(tied)
    out = export_gguf(lm, tokenizer, tmp_path / "out")
    tensors, fields, _ = h.read_back(out / FILE)
    hf = {k: v.numpy() for k, v in hf_tensors(lm).items()}
    assert len(tensors) == len(hf) == 2 + 9 * 2 + (0 if tied else 1)
    layer = "model.layers.1."
    q, k = tensors["blk.1.attn_q.weight"], tensors["blk.1.attn_k.weight"]
    assert not np.array_equal(q, hf[layer + "self_attn.q_proj.weight"])  # permuted
    assert np.array_equal(to_rotate_half(q, HEADS), hf[layer + "self_attn.q_proj.weight"])
    assert np.array_equal(to_rotate_half(k, KV_HEADS), hf[layer + "self_attn.k_proj.weight"])
    for ours, theirs in (("self_attn.v_proj", "attn_v"), ("self_attn.o_proj", "attn_output"),
                         ("mlp.gate_proj", "ffn_gate"), ("mlp.up_proj", "ffn_up"),
                         ("mlp.down_proj", "ffn_down"), ("input_layernorm", "attn_norm"),
                         ("post_attention_layernorm", "ffn_norm")):
        assert np.array_equal(tensors[f"blk.1.{theirs}.weight"], hf[f"{layer}{ours}.weight"])
    assert np.array_equal(tensors["token_embd.weight"], hf["model.embed_tokens.weight"])
    assert np.array_equal(tensors["output_norm.weight"], hf["model.norm.weight"])
    assert fields["general.architecture"] == "llama"
    assert (fields["llama.context_length"], fields["llama.embedding_length"],
            fields["llama.feed_forward_length"], fields["llama.block_count"],
            fields["llama.attention.head_count"], fields["llama.attention.head_count_kv"],
            fields["llama.rope.dimension_count"]) == (CONTEXT, 64, 128, 2, HEADS, KV_HEADS, 16)
    assert fields["llama.rope.freq_base"] == 500000.0
    assert fields["llama.attention.layer_norm_rms_epsilon"] == pytest.approx(1e-6)
    assert fields["tokenizer.ggml.pre"] == "gpt-2"


def test_rope_scaling_is_written_as_llama_cpp_reads_it(tmp_path, tokenizer):
    _, fields, _ = h.read_back(export_gguf(h.llama(rope_scaling="linear", rope_factor=4.0),
                                         tokenizer, tmp_path / "a") / FILE)
    assert (fields["llama.rope.scaling.type"], fields["llama.rope.scaling.factor"]) == \
        ("linear", 4.0)
    lm = h.llama(rope_scaling="llama3", rope_factor=8.0, rope_original_max_len=32)
    tensors, fields, _ = h.read_back(export_gguf(lm, tokenizer, tmp_path / "b") / FILE)
    divisors = tensors["rope_freqs.weight"]  # llama.cpp divides pair i's frequency by these
    assert divisors.shape == (8,) and divisors[0] == 1 and divisors[-1] == 8
    default = lm.config.rope_theta ** (-np.arange(0, 16, 2) / 16)
    np.testing.assert_allclose(default / divisors, lm.rotary.inv_freq.numpy(), rtol=1e-6)


def test_what_qwen2_and_qwen3_cannot_hold_is_refused_naming_why(tmp_path, tokenizer):
    for changes, arch in (({"qkv_bias": True}, "qwen2"), ({"qk_norm": True}, "qwen3")):
        lm = h.llama(rope_scaling="llama3", rope_factor=8.0, rope_original_max_len=32, **changes)
        with pytest.raises(UsageError, match=f"llama.cpp's {arch} architecture cannot express "
                           "rope_scaling='llama3'"):
            export_gguf(lm, tokenizer, tmp_path / "a")
    with pytest.raises(UsageError, match="cannot express qk_norm with biases"):
        export_gguf(h.llama(qk_norm=True, qkv_bias=True), tokenizer, tmp_path / "a")
    assert not (tmp_path / "a").exists()


QWEN = {"qwen2-tied": ("qwen2", True, 8), "qwen3": ("qwen3", False, 16)}  # arch, tied, d_head
# transformers' names of a block's tensors -> llama.cpp's (gguf's TensorNameMap not consulted)
BLOCK = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q",
         "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
         "self_attn.o_proj": "attn_output", "self_attn.q_norm": "attn_q_norm",
         "self_attn.k_norm": "attn_k_norm", "post_attention_layernorm": "ffn_norm",
         "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}


def qwen(case: str, directory, seed: int = 0):
    """(transformers' tiny random model of ``case``, ours read from its saved directory):
    interop.llama_helpers' Qwen2 (q/k/v biases, tied head) and Qwen3 (q/k norms, head width 16
    over a width of 32), 4 query heads over 2 key/value heads."""
    pytest.importorskip("transformers")
    from interop.llama_helpers import save_hf

    hf = save_hf(case, directory, seed, vocab_size=V, max_position_embeddings=CONTEXT)
    return hf, load_llama(directory)[0]


@pytest.mark.parametrize("case", QWEN)
def test_qwen_reads_back_as_transformers_tensors_unpermuted(tmp_path, tokenizer, case):
    arch, tied, d_head = QWEN[case]
    hf, lm = qwen(case, tmp_path / "hf")
    tensors, fields, _ = h.read_back(export_gguf(lm, tokenizer, tmp_path / "out") / FILE)
    names = {"model.embed_tokens.weight": "token_embd.weight",
             "model.norm.weight": "output_norm.weight", "lm_head.weight": "output.weight"}
    names |= {f"model.layers.{i}.{theirs}.{p}": f"blk.{i}.{ours}.{p}" for i in range(2)
              for theirs, ours in BLOCK.items() for p in ("weight", "bias")}
    want = {names[k]: v.numpy() for k, v in hf.state_dict().items()
            if not (tied and k == "lm_head.weight")}
    assert sorted(tensors) == sorted(want)
    for name, value in want.items():  # q and k as transformers has them: NEOX RoPE, halves
        assert np.array_equal(tensors[name], value), name
    assert ("blk.1.attn_k.bias" in tensors, "blk.1.attn_k_norm.weight" in tensors) == \
        (arch == "qwen2", arch == "qwen3")
    assert fields["general.architecture"] == arch
    assert (fields[f"{arch}.context_length"], fields[f"{arch}.embedding_length"],
            fields[f"{arch}.block_count"], fields[f"{arch}.attention.head_count"],
            fields[f"{arch}.attention.head_count_kv"], fields[f"{arch}.attention.key_length"],
            fields[f"{arch}.attention.value_length"], fields[f"{arch}.rope.dimension_count"]) \
        == (CONTEXT, 32, 2, 4, 2, d_head, d_head, d_head)
    assert fields[f"{arch}.rope.freq_base"] == lm.config.rope_theta
    assert fields[f"{arch}.attention.layer_norm_rms_epsilon"] == pytest.approx(1e-5)


@pytest.mark.parametrize("case", QWEN)
def test_llama_cpp_runs_qwen_with_our_greedy_tokens_at_float32(tmp_path, tokenizer, case):
    _, lm = qwen(case, tmp_path / "hf", seed=1)
    llm = h.llama_cpp_model(export_gguf(lm, tokenizer, tmp_path / "out") / FILE, CONTEXT)
    want, margins = h.greedy_with_margins(lm, h.PROMPTS, 16)
    got = [h.llama_cpp_greedy(llm, p, 16) for p in h.PROMPTS]
    assert_tokens_agree_where_decided(want, got, margins, GGML_BOUND, at_least=2)


@pytest.mark.parametrize("tied", [True, False])
def test_llama_cpp_greedy_equals_ours_at_float32(tmp_path, tokenizer, tied):
    lm = h.llama(tied, seed=1)
    llm = h.llama_cpp_model(export_gguf(lm, tokenizer, tmp_path / "out") / FILE, CONTEXT)
    want, margins = h.greedy_with_margins(lm, h.PROMPTS, 16)
    got = [h.llama_cpp_greedy(llm, p, 16) for p in h.PROMPTS]
    assert_tokens_agree_where_decided(want, got, margins, GGML_BOUND, at_least=2)


def test_llama_cpp_perplexity_at_q8_0_within_one_percent_of_ours(tmp_path, tokenizer):
    # std 0.1: measured ratios 0.997-1.002 (seeds 0-2); at 0.3, whose logits q8_0's rounding
    # of the activations moves more, 0.98-1.05
    lm = h.llama(seed=2, std=0.1)
    out = export_gguf(lm, tokenizer, tmp_path / "out", kind="q8_0")
    llm = h.llama_cpp_model(out / FILE, CONTEXT)
    ids = tokenizer.encode(" ".join(h.TEXT[:4]))[:CONTEXT]
    ours = np.exp(h.our_nll(lm, ids))
    assert np.exp(h.llama_cpp_nll(llm, ids)) == pytest.approx(ours, rel=0.01)
