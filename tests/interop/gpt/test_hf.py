"""Hugging Face GPT-2 / OpenAI GPT directories in and out: logits, greedy tokens and the cache
against transformers' own models on random local weights (nothing downloaded)."""

from __future__ import annotations

import json
import os

import pytest
import torch
from conftest import openai_gpt_files
from safetensors.torch import load_file, save_file

from decoderkit.base.errors import UsageError
from decoderkit.generation.lm.complete import generate
from decoderkit.interop.gpt.hf import export_transformers, load_hf_gpt
from decoderkit.nn.lm.model import DecoderOnlyLM, LMConfig
from decoderkit.text.lm.tokenizer import LMTokenizer

transformers = pytest.importorskip("transformers")

V, CONTEXT = 61, 64
IDS = torch.tensor([[5, 17, 3, 42, 8, 8, 60, 1, 29], [0, 33, 12, 7, 50, 2, 9, 14, 21]])


def randomized(model, seed=0):
    """Every parameter N(0, 0.3^2) (LayerNorms and biases off their (1, 0) init)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(0.3 * torch.randn(p.shape, generator=g, dtype=torch.float64))
    return model.eval()


def hf_model(kind: str, dtype=torch.float64, random: bool = True, **overrides):
    """A small HF model, every parameter randomised (``random``) or at HF's own init (seed 0)."""
    torch.manual_seed(0)
    shape = dict(vocab_size=V, n_positions=CONTEXT, n_embd=16, n_layer=2, n_head=4) | overrides
    if kind == "gpt2":
        config = transformers.GPT2Config(**shape)
        model = transformers.GPT2LMHeadModel(config)
    else:
        config = transformers.OpenAIGPTConfig(**shape)
        model = transformers.OpenAIGPTLMHeadModel(config)
    return randomized(model.to(dtype)) if random else model.to(dtype).eval()


def saved(model, directory, *, strip_prefix=False, bin_file=False):
    """save_pretrained, then optionally the other key form or the .bin format (with the
    attention mask buffers older files carry)."""
    model.save_pretrained(directory)
    if strip_prefix or bin_file:
        tensors = load_file(directory / "model.safetensors")
        (directory / "model.safetensors").unlink()
        if strip_prefix:
            tensors = {k.removeprefix("transformer."): v for k, v in tensors.items()}
        if bin_file:
            tensors["transformer.h.0.attn.bias"] = torch.ones(1, 1, CONTEXT, CONTEXT).tril()
            tensors["transformer.h.0.attn.masked_bias"] = torch.tensor(-1e4)
            torch.save(tensors, directory / "pytorch_model.bin")
        else:
            save_file(tensors, directory / "model.safetensors")
    return directory


def max_diff(ours, hf, ids=IDS):
    with torch.no_grad():
        return float((ours(ids) - hf(ids).logits).abs().max())


@pytest.mark.parametrize("kind", ["gpt2", "openai-gpt"])
@pytest.mark.parametrize("form", ["safetensors", "no prefix", "bin"])
def test_logits_equal_transformers_float64(tmp_path, kind, form):
    hf = hf_model(kind)
    saved(hf, tmp_path, strip_prefix=form == "no prefix", bin_file=form == "bin")
    ours, tokenizer = load_hf_gpt(tmp_path)
    assert ours.embed.lut.weight.dtype == torch.float64 and tokenizer is None
    assert ours.config.norm_first == (kind == "gpt2")
    assert max_diff(ours, hf) <= 1e-12


@pytest.mark.parametrize("kind", ["gpt2", "openai-gpt"])
def test_logits_equal_transformers_float32(tmp_path, kind):
    hf = hf_model(kind, torch.float32)
    ours, _ = load_hf_gpt(saved(hf, tmp_path))
    assert ours.embed.lut.weight.dtype == torch.float32
    assert max_diff(ours, hf) <= 1e-5


@pytest.mark.parametrize("kind", ["gpt2", "openai-gpt"])
def test_40_greedy_tokens_equal_transformers_generate(tmp_path, kind):
    # settings whose 40 greedy tokens vary (random tiny models tend to repeat one token)
    hf = hf_model("gpt2", tie_word_embeddings=False) if kind == "gpt2" \
        else hf_model(kind, random=False)
    ours, _ = load_hf_gpt(saved(hf, tmp_path))
    prompt = IDS[:1, :5]
    with torch.no_grad():
        want = hf.generate(prompt, max_new_tokens=40, do_sample=False, min_new_tokens=40,
                           pad_token_id=0, eos_token_id=None)[0, 5:].tolist()
    assert generate(ours, [prompt[0].tolist()], max_new_tokens=40, greedy=True) == [want]
    assert len(set(want)) > 3  # a varied continuation, not one repeated token


@pytest.mark.parametrize("kind", ["gpt2", "openai-gpt"])
def test_cached_steps_equal_the_full_forward_at_every_step(tmp_path, kind):
    hf = hf_model(kind)
    ours, _ = load_hf_gpt(saved(hf, tmp_path))
    with torch.no_grad():
        full = hf(IDS).logits  # (2, T, V)
        cache = ours.new_cache(2, IDS.size(1))
        steps = [ours(IDS[:, t:t + 1], cache, cache.at(t)) for t in range(IDS.size(1))]
    assert float((torch.cat(steps, 1) - full).abs().max()) <= 1e-12


def test_untied_head_and_n_inner(tmp_path):
    hf = hf_model("gpt2", tie_word_embeddings=False, n_inner=24, activation_function="relu")
    ours, _ = load_hf_gpt(saved(hf, tmp_path))
    assert not ours.config.tie_head and ours.config.d_ff == 24
    assert ours.generator.proj.weight is not ours.embed.lut.weight
    assert max_diff(ours, hf) <= 1e-12


def test_gpt2_tokenizer_from_vocab_and_merges(tmp_path):
    trained = LMTokenizer.train_bpe(["the cat sat on the mat, the end"] * 4, 270)
    trained.hf.model.save(str(tmp_path))  # vocab.json + merges.txt, GPT-2's files
    saved(hf_model("gpt2", vocab_size=trained.vocab_size), tmp_path)
    _, tokenizer = load_hf_gpt(tmp_path)
    want = transformers.GPT2Tokenizer.from_pretrained(str(tmp_path))
    text = "the mat sat, the cat ended"
    assert tokenizer.encode(text) == want.encode(text)
    assert tokenizer.vocab_size == trained.vocab_size


def test_openai_gpt_tokenizer_from_vocab_and_merges_samples_from_text(tmp_path, capsys):
    from decoderkit.cli import main

    text = "the cat sat on the mat, the end. The Mat's cat!"
    openai_gpt_files(tmp_path, text)
    want = transformers.OpenAIGPTTokenizer(vocab=str(tmp_path / "vocab.json"),
                                           merges=str(tmp_path / "merges.txt"))
    saved(hf_model("openai-gpt", vocab_size=len(want)), tmp_path)
    ours, tokenizer = load_hf_gpt(tmp_path)
    assert tokenizer.encode(text) == want.encode(text, add_special_tokens=False)
    prompt = "The cat"
    expected = generate(ours, [tokenizer.encode(prompt)], max_new_tokens=5, greedy=True)[0]
    assert main(["lm", "sample", "--checkpoint", str(tmp_path), "--prompt", prompt,
                 "--greedy", "--max-new-tokens", "5"]) == 0
    assert capsys.readouterr().out == prompt + tokenizer.decode(expected) + "\n"


def edit_config(directory, **changes):
    file = directory / "config.json"
    file.write_text(json.dumps(json.loads(file.read_text()) | changes))


def test_errors_name_the_file_and_the_tensor(tmp_path):
    saved(hf_model("gpt2"), tmp_path)
    weights = tmp_path / "model.safetensors"
    tensors = load_file(weights)
    edit_config(tmp_path, model_type="bert")
    with pytest.raises(UsageError, match="config.json: model_type 'bert' is not one"):
        load_hf_gpt(tmp_path)
    edit_config(tmp_path, model_type="gpt2", n_inner=24)
    with pytest.raises(UsageError, match=r"model.safetensors: tensor 'transformer.h.0.mlp.c_fc."
                                         r"weight' has shape \(16, 64\), but config.json gives "
                                         r"a model expecting \(16, 24\)"):
        load_hf_gpt(tmp_path)
    edit_config(tmp_path, n_inner=None)
    save_file({k: v for k, v in tensors.items() if k != "transformer.h.1.ln_2.bias"}, weights)
    with pytest.raises(UsageError, match="model.safetensors: tensor 'h.1.ln_2.bias'.* is missing"):
        load_hf_gpt(tmp_path)
    save_file(tensors | {"score.weight": torch.zeros(2, 16)}, weights)
    with pytest.raises(UsageError, match="tensor 'score.weight' does not belong"):
        load_hf_gpt(tmp_path)
    for key, value in (("layer_norm_epsilon", 1e-6), ("scale_attn_by_inverse_layer_idx", True),
                       ("activation_function", "quick_gelu")):
        edit_config(tmp_path, **{key: value})
        with pytest.raises(UsageError, match=f"config.json: {key}[= ].*{value}"):
            load_hf_gpt(tmp_path)
        edit_config(tmp_path, **{key: {"layer_norm_epsilon": 1e-5, "activation_function":
                                       "gelu_new"}.get(key, False)})
    weights.unlink()
    with pytest.raises(UsageError, match=r"has none of model.safetensors, model.safetensors."
                                         r"index.json \(sharded\) or pytorch_model.bin"):
        load_hf_gpt(tmp_path)


@pytest.mark.parametrize("key, value, needle", [
    ("activation_function", ["gelu_new"], "activation_function must be one of ('gelu_new', "),
    ("n_layer", "2", "n_layer must be an integer in [1, 512], got '2' (str)"),
    ("n_layer", 2.0, "n_layer must be an integer in [1, 512], got 2.0 (float)"),
    ("n_head", True, "n_head must be an integer in [1, 1024], got True (bool)"),
    ("tie_word_embeddings", "no", "tie_word_embeddings must be a bool, got 'no' (str)"),
    ("n_inner", 0, "n_inner must be an integer in [1, 262144] or null, got 0 (int)"),
    ("resid_pdrop", "0.1", "resid_pdrop must be a finite number in [0.0, 1.0), got '0.1'"),
])
def test_config_values_of_another_type_are_refused_not_coerced(tmp_path, key, value, needle):
    saved(hf_model("gpt2", random=False), tmp_path)
    edit_config(tmp_path, **{key: value})
    with pytest.raises(UsageError) as caught:
        load_hf_gpt(tmp_path)
    assert str(caught.value).startswith(f"{tmp_path / 'config.json'}: {needle}"), caught.value


def test_a_vocabulary_giving_one_id_to_many_tokens_is_refused(tmp_path):
    saved(hf_model("gpt2", random=False), tmp_path)
    (tmp_path / "vocab.json").write_text(json.dumps({c: 0 for c in "abcdef"}))
    (tmp_path / "merges.txt").write_text("#version: 0.2\n")
    with pytest.raises(UsageError, match=r"vocab.json: id 0 is given to 6 tokens \('a', 'b', "):
        load_hf_gpt(tmp_path)
    (tmp_path / "vocab.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(UsageError, match="vocab.json .*recursion limit"):
        load_hf_gpt(tmp_path)


def lm(**overrides) -> DecoderOnlyLM:
    torch.manual_seed(0)
    config = LMConfig(**dict(vocab_size=V, n_layers=2, d_model=16, n_heads=4, d_ff=32,
                             max_len=CONTEXT, dropout=0.0) | overrides)
    return randomized(DecoderOnlyLM(config).double())


@pytest.mark.parametrize("overrides", [dict(), dict(bias=False, activation="gelu"),
                                       dict(tie_head=False, activation="swish")])
def test_export_loads_in_gpt2lmheadmodel_with_identical_logits(tmp_path, overrides):
    ours = lm(**overrides)
    tokenizer = LMTokenizer.characters("abcdefgh \n")
    out = export_transformers(ours, tokenizer, tmp_path / "hf")
    hf = transformers.GPT2LMHeadModel.from_pretrained(out).eval()
    assert hf.dtype == torch.float64
    assert max_diff(ours, hf) <= 1e-12
    back, tok = load_hf_gpt(out)  # and back through our loader
    assert max_diff(back, hf) <= 1e-12
    assert tok.encode("bad cafe") == tokenizer.encode("bad cafe")
    with pytest.raises(UsageError, match="exists"):
        export_transformers(ours, tokenizer, out)


def test_export_refuses_what_gpt2_cannot_express(tmp_path):
    for overrides, name in ((dict(norm_first=False), "norm_first"),
                            (dict(positions="sinusoidal"), "positions"),
                            (dict(scale_embeddings=True), "scale_embeddings")):
        with pytest.raises(UsageError, match=f"GPT2LMHeadModel cannot express {name}="):
            export_transformers(lm(**overrides), None, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_tokenizer_file_that_is_a_pipe_is_named_not_skipped(tmp_path):
    saved(hf_model("gpt2", random=False), tmp_path)
    os.mkfifo(tmp_path / "vocab.json")
    (tmp_path / "merges.txt").write_text("#version: 0.2\n")
    with pytest.raises(UsageError, match="vocab.json is a named pipe, not a regular file"):
        load_hf_gpt(tmp_path)
    (tmp_path / "vocab.json").unlink()
    (tmp_path / "merges.txt").unlink()
    os.mkfifo(tmp_path / "tokenizer.json")
    with pytest.raises(UsageError, match="tokenizer.json is a named pipe, not a regular file"):
        load_hf_gpt(tmp_path)
