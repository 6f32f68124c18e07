"""Llama-family directories (llama, mistral, qwen2, qwen3) against transformers' own models,
built from tiny random configs in the test: float32 logits, the cache, greedy decoding,
continuous batching, int8, the parameter count, and what is refused."""

from __future__ import annotations

import json

import pytest
import torch

from conftest import assert_tokens_agree_where_decided, step_margins
from decoderkit.base.errors import UsageError
from decoderkit.generation.lm.complete import generate
from decoderkit.generation.lm.rowwise import for_inference
from decoderkit.interop.checkpoints import load_checkpoint
from decoderkit.interop.llama.hf import load_llama, read_llama_config
from decoderkit.report.params import count_parameters, lm_parameters

transformers = pytest.importorskip("transformers")
from interop.llama_helpers import CASES, save_hf  # noqa: E402 (needs transformers)

V = 96
IDS = torch.randint(0, V, (2, 30), generator=torch.Generator().manual_seed(1))


@pytest.fixture(params=list(CASES))
def pair(request, tmp_path):
    """(transformers' model, ours read from its saved directory) of each case."""
    hf = save_hf(request.param, tmp_path)
    return hf, load_llama(tmp_path)[0]


def test_logits_equal_transformers_and_the_count_its_parameters(pair):
    hf, ours = pair
    with torch.no_grad():
        want, got = hf(IDS).logits, ours(IDS)
    assert (got - want).abs().max() <= 1e-4
    assert want.std() > 0.5  # logits that differ across tokens: a wrong map would show
    n = sum(p.numel() for p in hf.parameters())
    assert count_parameters(ours) == lm_parameters(ours.config) == n


def test_cached_steps_equal_the_uncached_forward(pair):
    _, ours = pair
    with torch.no_grad():
        full = ours(IDS)
        cache = ours.new_cache(2, 30)
        steps = [ours(IDS[:, :11], cache, cache.at(0, 11))]
        steps += [ours(IDS[:, t:t + 1], cache, cache.at(t)) for t in range(11, 30)]
    assert (torch.cat(steps, dim=1) - full).abs().max() <= 1e-5


def hf_greedy(hf, prompts: list[list[int]], n: int):
    """transformers' greedy tokens of each prompt alone, and its top-1 margins per step."""
    want, margins = [], []
    with torch.no_grad():
        for prompt in prompts:
            out = hf.generate(torch.tensor([prompt]), max_new_tokens=n, min_new_tokens=n,
                              do_sample=False, pad_token_id=0, eos_token_id=None,
                              output_scores=True, return_dict_in_generate=True)
            want.append(out.sequences[0, len(prompt):].tolist())
            logp = [torch.log_softmax(s[0], -1) for s in out.scores]
            margins.append(step_margins(torch.stack(logp).topk(2).values))
    return want, margins


PROMPTS = [[3, 50, 7, 81, 12, 5, 66], [9], [40, 41, 42, 43]]


def test_greedy_rows_equal_transformers_generate_where_its_margin_decides(pair):
    """Rows of different lengths decoded together (continuous batching, each at its own RoPE
    position) against transformers' generate of each prompt alone."""
    hf, ours = pair
    want, margins = hf_greedy(hf, PROMPTS, 16)
    got = generate(ours, PROMPTS, max_new_tokens=16, greedy=True)
    assert_tokens_agree_where_decided(want, got, margins, 1e-4, at_least=1)


@pytest.mark.engines
@pytest.mark.parametrize("case", ["llama-gqa", "qwen3"])
def test_rows_together_equal_each_row_alone(tmp_path, case):
    """Bit for bit through the rowwise kernels: a row's tokens do not depend on its companions'
    lengths (their positions and RoPE angles differ)."""
    save_hf(case, tmp_path)
    model = for_inference(load_llama(tmp_path)[0])
    together = generate(model, PROMPTS, max_new_tokens=12, seed=[5, 6, 7], temperature=0.8)
    alone = [generate(model, [p], max_new_tokens=12, seed=s, temperature=0.8)[0]
             for p, s in zip(PROMPTS, [5, 6, 7], strict=True)]
    assert together == alone and len({t for row in alone for t in row}) > 3


@pytest.mark.engines
def test_int8_logits_stay_close_to_float32(tmp_path):
    """Relative to the float32 logits' standard deviation s: root mean square <= 0.08 s, max
    <= 0.4 s (measured 0.033-0.048 s and 0.13-0.31 s: llama-gqa, qwen3, qwen2-tied, seeds
    0-2). Twice GPT-2's bound (tests/generation/test_int8.py): a block has five int8 products
    (q/k/v, o, gate, up, down), and the gate's product multiplies the up's, so their ~1%
    relative errors add; another seed's model is far outside it (so the bound can fail)."""
    from decoderkit.generation.int8 import int8_available

    if not int8_available():
        pytest.skip("no fbgemm int8 engine")
    save_hf("llama-gqa", tmp_path)
    model = load_llama(tmp_path)[0]
    q = for_inference(model, int8=True)
    other = save_hf("llama-gqa", tmp_path / "other", seed=1)
    with torch.inference_mode():
        ref, out, far = model(IDS), q(IDS), other(IDS).logits
    s = ref.std()
    assert (out - ref).pow(2).mean().sqrt() <= 0.08 * s and (out - ref).abs().max() <= 0.4 * s
    assert (far - ref).pow(2).mean().sqrt() > 0.08 * s


def test_the_opener_reads_each_model_type_as_a_language_model(tmp_path):
    save_hf("qwen3", tmp_path)
    ckpt = load_checkpoint(tmp_path)
    c = ckpt.config
    assert (c.positions, c.norm, c.ffn, c.qk_norm, c.kv_heads, c.d_head) == \
        ("rope", "rms", "gated", True, 2, 16)
    assert ckpt.meta["origin"] == "transformers" and ckpt.tokenizer is None


def test_older_configs_rope_theta_and_rope_scaling_read_alike(tmp_path):
    """transformers 4's keys (``rope_theta``, ``rope_scaling`` with ``type`` or ``rope_type``)
    give the config transformers 5's ``rope_parameters`` gives."""
    save_hf("llama-mqa-tied-llama3", tmp_path)
    new = read_llama_config(tmp_path)
    file = tmp_path / "config.json"
    raw = json.loads(file.read_text())
    params = raw.pop("rope_parameters")
    raw["rope_theta"] = params.pop("rope_theta")
    raw["rope_scaling"] = params | {"type": params.pop("rope_type")}
    file.write_text(json.dumps(raw))
    assert read_llama_config(tmp_path) == new
    assert (new.rope_scaling, new.rope_factor, new.rope_original_max_len) == ("llama3", 8.0, 16)


def edit_config(directory, **changes):
    file = directory / "config.json"
    raw = json.loads(file.read_text()) | changes
    file.write_text(json.dumps({k: v for k, v in raw.items() if v is not None}))


@pytest.mark.parametrize("changes, message", [
    ({"model_type": "gemma"}, "model_type 'gemma' is not one decoderkit reads"),
    ({"rope_parameters": {"rope_type": "yarn", "factor": 4.0, "rope_theta": 1e4}},
     r"rope_parameters type 'yarn' is not implemented \(decoderkit computes \('default', "
     r"'linear', 'llama3'\)\)"),
    ({"rope_parameters": {"rope_type": "ntk", "rope_theta": 1e4}}, "type 'ntk' is unknown"),
    ({"hidden_act": "gelu"}, "hidden_act must be one of"),
    ({"attention_bias": True}, "attention_bias=True with mlp_bias=False is not supported"),
    ({"partial_rotary_factor": 0.5}, "partial_rotary_factor=0.5 is not supported"),
    ({"num_key_value_heads": 3}, "n_kv_heads must be a positive divisor of n_heads=4, got 3"),
])
def test_what_decoderkit_cannot_compute_is_refused_in_one_line(tmp_path, changes, message):
    save_hf("llama-gqa", tmp_path)
    edit_config(tmp_path, **changes)
    with pytest.raises(UsageError, match=message):
        load_llama(tmp_path)


def test_a_config_whose_shapes_disagree_with_the_tensors_names_the_tensor(tmp_path):
    save_hf("llama-gqa", tmp_path)
    edit_config(tmp_path, intermediate_size=40)
    with pytest.raises(UsageError, match="tensor 'model.layers.0.mlp.gate_proj.weight' has "
                                         r"shape \(48, 32\), but config.json gives a model "
                                         r"expecting \(40, 32\)"):
        load_llama(tmp_path)
    edit_config(tmp_path, intermediate_size=48, num_key_value_heads=4)
    with pytest.raises(UsageError, match="tensor 'model.layers.0.self_attn.k_proj.weight' has "
                                         r"shape \(16, 32\)"):
        load_llama(tmp_path)


def test_a_claim_far_beyond_the_files_is_refused_before_anything_is_built(tmp_path):
    save_hf("llama-gqa", tmp_path)
    edit_config(tmp_path, num_hidden_layers=32, hidden_size=4096, intermediate_size=11008,
                num_attention_heads=32, num_key_value_heads=8)
    with pytest.raises(UsageError, match="holds at most 21,664 numbers, but config.json "
                                         "describes a model of at least"):
        load_llama(tmp_path)


def test_a_sliding_window_is_the_context(tmp_path):
    """Mistral's window (48 of 64 positions) is the context: within it, windowed attention is
    full attention; past it generation is refused like any overflow."""
    save_hf("mistral", tmp_path)
    model = load_llama(tmp_path)[0]
    assert model.config.max_len == 48
    with pytest.raises(UsageError, match="exceeds max_len 48|positions exceed"):
        cache = model.new_cache(1, 48)
        model.features(torch.zeros(1, 49, dtype=torch.long), cache, cache.at(0, 49))
    edit_config(tmp_path, model_type="qwen2", sliding_window=20, use_sliding_window=True)
    assert read_llama_config(tmp_path).max_len == 20


def test_bfloat16_weights_are_read_as_float32(tmp_path):
    """A bf16 directory (as real checkpoints are) opens as float32: the logits of transformers'
    own float32 reading of it."""
    save_hf("llama-gqa", tmp_path / "f32").to(torch.bfloat16).save_pretrained(tmp_path / "bf16")
    ours = load_llama(tmp_path / "bf16")[0]
    hf = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "bf16",
                                                           dtype=torch.float32).eval()
    assert ours.embed.lut.weight.dtype == torch.float32
    with torch.no_grad():
        assert (ours(IDS) - hf(IDS).logits).abs().max() <= 1e-4


def test_a_sharded_directory_reads_as_one(tmp_path):
    """model.safetensors.index.json and its shards (nn.stored): the same model."""
    hf = save_hf("qwen3", tmp_path / "one")
    hf.save_pretrained(tmp_path / "sharded", max_shard_size="40KB")
    assert len(list((tmp_path / "sharded").glob("model-*.safetensors"))) > 1
    with torch.no_grad():
        one, sharded = load_llama(tmp_path / "one")[0], load_llama(tmp_path / "sharded")[0]
        assert torch.equal(sharded(IDS), one(IDS))


LLAMA3_SCALING = {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                  "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
REAL = {  # the shapes of models people download (config.json's keys, as published)
    "Llama-3.2-1B": {"model_type": "llama", "hidden_size": 2048, "num_attention_heads": 32,
                     "num_key_value_heads": 8, "head_dim": 64, "intermediate_size": 8192,
                     "num_hidden_layers": 16, "tie_word_embeddings": True,
                     "max_position_embeddings": 131072, "vocab_size": 128256,
                     "rope_theta": 500000.0, "rope_scaling": LLAMA3_SCALING},
    "Qwen2.5-0.5B": {"model_type": "qwen2", "hidden_size": 896, "num_attention_heads": 14,
                     "num_key_value_heads": 2, "intermediate_size": 4864,
                     "num_hidden_layers": 24, "tie_word_embeddings": True,
                     "max_position_embeddings": 32768, "vocab_size": 151936},
    "Qwen3-0.6B": {"model_type": "qwen3", "hidden_size": 1024, "num_attention_heads": 16,
                   "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 3072,
                   "num_hidden_layers": 28, "tie_word_embeddings": True,
                   "max_position_embeddings": 40960, "vocab_size": 151936},
    "Mistral-7B-v0.1": {"model_type": "mistral", "hidden_size": 4096, "num_attention_heads": 32,
                        "num_key_value_heads": 8, "intermediate_size": 14336,
                        "num_hidden_layers": 32, "max_position_embeddings": 32768,
                        "sliding_window": 4096, "vocab_size": 32000},
}


@pytest.mark.parametrize("name", list(REAL))
def test_published_shapes_count_as_transformers_builds_them(tmp_path, name):
    """decoderkit params of a real model's config.json = transformers' model of it (built on
    the meta device: shapes only); the context is the window, at most 65,536."""
    (tmp_path / "config.json").write_text(json.dumps(REAL[name]))
    ours = read_llama_config(tmp_path)
    with torch.device("meta"):
        hf = transformers.AutoModelForCausalLM.from_config(
            transformers.AutoConfig.from_pretrained(tmp_path))
    assert lm_parameters(ours) == sum(p.numel() for p in hf.parameters())
    assert ours.max_len == {"Llama-3.2-1B": 65536, "Mistral-7B-v0.1": 4096}.get(
        name, REAL[name]["max_position_embeddings"])


@pytest.mark.parametrize("int8", [False, True], ids=["float32", "int8"])
def test_padded_rows_past_the_tokenizer_are_never_generated(tmp_path, int8):
    """A directory of more rows than tokens, its head rigged so a padded row wins every argmax:
    with the checkpoint's ``vocab`` (the tokenizer's size) greedy and drawn ids stay in the
    tokenizer, float32's greedy equals transformers' generate with those ids suppressed where
    its margin decides (int8's head, scaled to the rigged rows, decides too little); the same
    model unchecked chooses padded ids."""
    from decoderkit.generation.int8 import int8_available
    from interop.llama_helpers import save_padded

    if int8 and not int8_available():
        pytest.skip("no fbgemm int8 engine")
    tokenizer = save_padded(tmp_path)
    ckpt = load_checkpoint(tmp_path)
    n, V = tokenizer.vocab_size, ckpt.config.vocab_size
    assert ckpt.vocab == n < V
    model, prompts = for_inference(ckpt.model, int8), [tokenizer.encode("to be"), [3, 1]]
    assert all(max(row) >= n for row in generate(model, prompts, max_new_tokens=4, greedy=True))
    greedy = generate(model, prompts, max_new_tokens=12, greedy=True, vocab=ckpt.vocab)
    drawn = generate(model, prompts * 4, max_new_tokens=12, seed=1, vocab=ckpt.vocab)
    assert all(t < n for row in greedy + drawn for t in row)
    assert len({t for row in drawn for t in row}) > 3
    if int8:
        return
    hf = transformers.AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    want, margins = [], []
    with torch.no_grad():
        for prompt in prompts:
            ids = torch.tensor([prompt])  # a mask: its pad id 0 is the prompt's space
            out = hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=12,
                              min_new_tokens=12, do_sample=False, pad_token_id=0,
                              eos_token_id=None,
                              suppress_tokens=list(range(n, V)), output_scores=True,
                              return_dict_in_generate=True)
            want.append(out.sequences[0, len(prompt):].tolist())
            logp = torch.stack([s[0].log_softmax(-1) for s in out.scores])
            margins.append(step_margins(logp.topk(2).values))
    assert_tokens_agree_where_decided(want, greedy, margins, 1e-4, at_least=1)
