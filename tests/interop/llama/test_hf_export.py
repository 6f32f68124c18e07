"""lm export --to transformers of Llama-shaped models: the directory transformers opens gives
the same logits (ours trained from scratch, and a foreign directory read and written back);
CTranslate2's converter takes it; what no Llama-family directory holds is refused by name."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from decoderkit.base.errors import UsageError
from decoderkit.interop.llama.hf import load_llama
from decoderkit.interop.llama.hf_export import export_llama
from decoderkit.interop.lm.architectures import model_type_of
from decoderkit.nn.lm.model import DecoderOnlyLM
from decoderkit.nn.lm.presets import lm_preset
from decoderkit.text.lm.tokenizer import END_OF_TEXT, LMTokenizer

transformers = pytest.importorskip("transformers")
from interop.llama_helpers import save_hf  # noqa: E402 (needs transformers)

IDS = torch.randint(0, 60, (2, 17), generator=torch.Generator().manual_seed(2))
SMALL = dataclasses.replace(lm_preset("llama"), vocab_size=60, n_layers=2, d_model=32,
                            d_ff=40, max_len=64, rope_theta=5000.0)


def ours(seed: int = 0, **changes) -> DecoderOnlyLM:
    torch.manual_seed(seed)
    model = DecoderOnlyLM(dataclasses.replace(SMALL, **changes)).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(1 + 0.2 * torch.randn_like(p) if name.endswith("norm.weight")
                    else p * 8 if p.dim() > 1 else 0.5 * torch.randn_like(p))
    return model


@pytest.mark.parametrize("changes, kind", [
    ({}, "llama"),
    ({"tie_head": False, "n_kv_heads": 1, "rope_scaling": "llama3", "rope_factor": 4.0,
      "rope_original_max_len": 16}, "llama"),
    ({"qkv_bias": True, "rope_scaling": "linear", "rope_factor": 2.0}, "qwen2"),
    ({"qk_norm": True, "head_dim": 16}, "qwen3"),
    ({"bias": True}, "llama"),
])
def test_transformers_opens_the_export_with_the_same_logits(tmp_path, changes, kind):
    model = ours(**changes)
    export_llama(model, None, tmp_path / "out")
    assert json.loads((tmp_path / "out/config.json").read_text())["model_type"] == kind
    hf = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "out").eval()
    with torch.no_grad():
        assert (hf(IDS).logits - model(IDS)).abs().max() <= 1e-4
    again = load_llama(tmp_path / "out")[0]
    assert again.config == dataclasses.replace(model.config, dropout=0.0)
    with torch.no_grad():
        assert torch.equal(again(IDS), model(IDS))


def test_a_foreign_directory_round_trips(tmp_path):
    hf = save_hf("qwen3", tmp_path / "hf")
    export_llama(load_llama(tmp_path / "hf")[0], None, tmp_path / "out")
    back = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "out").eval()
    with torch.no_grad():
        assert torch.equal(back(IDS).logits, hf(IDS).logits)


@pytest.mark.parametrize("changes, message", [
    ({"positions": "learned"}, "cannot express positions='learned'"),
    ({"ffn": "mlp"}, "cannot express ffn='mlp'"),
    ({"qk_norm": True, "qkv_bias": True}, "cannot express qk_norm with biases"),
    ({"bias": True, "qkv_bias": False}, "cannot express bias=True with qkv_bias=False"),
])
def test_what_no_llama_family_directory_holds_is_refused(changes, message):
    with pytest.raises(UsageError, match=message):
        model_type_of(dataclasses.replace(SMALL, **changes))


def test_ctranslate2_converts_the_export_and_generates_our_greedy_tokens(tmp_path):
    """Its converter reads the export (tokenizer.json, tokenizer_config.json); the server's
    CTranslate2 engine (``CT2Rows``) gives our greedy tokens where our margins decide. An
    export whose vocabulary has no end-of-text token is refused by the engine in one line."""
    converters = pytest.importorskip("ctranslate2.converters")
    from conftest import assert_tokens_agree_where_decided
    from decoderkit.generation.lm.complete import generate
    from decoderkit.generation.lm.row import Row, Settings
    from decoderkit.interop.lm.ctranslate2 import CT2Rows, open_generator

    tokenizer = LMTokenizer.characters("to be or not to be, that is the question")
    model = ours(vocab_size=60)
    export_llama(model, tokenizer, tmp_path / "bare")
    converters.TransformersConverter(str(tmp_path / "bare")).convert(str(tmp_path / "bare2"))
    with pytest.raises(UsageError, match="eos_token is null: the converted model's tokenizer "
                                         "has no end-of-text token"):
        open_generator(tmp_path / "bare2", 60)
    tokenizer.hf.add_special_tokens([END_OF_TEXT])
    export_llama(model, tokenizer, tmp_path / "out")
    converters.TransformersConverter(str(tmp_path / "out")).convert(str(tmp_path / "ct2"))
    rows = CT2Rows(*open_generator(tmp_path / "ct2", 60), context=64)
    prompts = [[3, 14, 15, 9], [26, 5]]
    runs = [Row(p, Settings(10, greedy=True)) for p in prompts]
    for row in runs:
        rows.join(row)
    while rows.running:
        rows.step()
    want = generate(model, prompts, max_new_tokens=10, greedy=True)
    with torch.no_grad():
        margins = []
        for p, w in zip(prompts, want, strict=True):
            top = model(torch.tensor([p + w]))[0, len(p) - 1:-1].log_softmax(-1).topk(2).values
            margins.append((top[:, 0] - top[:, 1]).tolist())
    assert_tokens_agree_where_decided(want, [r.tokens for r in runs], margins, 1e-3,
                                      at_least=1)


def test_ctranslate2_never_generates_a_padded_id(tmp_path):
    """A model of more rows than tokens (the converter names the extra rows <extra_id_N>),
    its head rigged so a padded row wins every argmax: ``CT2Rows`` suppresses the ids past a
    row's ``usable_vocab``, greedy (our greedy where our margins decide) and drawn."""
    converters = pytest.importorskip("ctranslate2.converters")
    from conftest import assert_tokens_agree_where_decided
    from decoderkit.generation.lm.complete import generate
    from decoderkit.generation.lm.row import Row, Settings
    from decoderkit.interop.lm.ctranslate2 import CT2Rows, open_generator
    from interop.llama_helpers import save_padded

    tokenizer = save_padded(tmp_path / "hf", end_of_text=True)
    model, n = load_llama(tmp_path / "hf")[0], tokenizer.vocab_size
    export_llama(model, tokenizer, tmp_path / "out")
    converters.TransformersConverter(str(tmp_path / "out")).convert(str(tmp_path / "ct2"))
    rows = CT2Rows(*open_generator(tmp_path / "ct2", model.config.vocab_size), context=64)
    prompts = [tokenizer.encode("to be"), [3, 1]]
    runs = [Row(p, Settings(10, greedy=True, usable_vocab=n)) for p in prompts]
    runs += [Row(p, Settings(10, temperature=1.5, usable_vocab=n)) for p in prompts * 3]
    for row in runs:
        rows.join(row)
    while rows.running:
        rows.step()
    assert all(t < n for row in runs for t in row.tokens)
    assert len({t for row in runs[2:] for t in row.tokens}) > 3
    want = generate(model, prompts, max_new_tokens=10, greedy=True, vocab=n)
    with torch.no_grad():
        margins = []
        for p, w in zip(prompts, want, strict=True):
            logp = model(torch.tensor([p + w]))[0, len(p) - 1:-1, :n].log_softmax(-1)
            top = logp.topk(2).values
            margins.append((top[:, 0] - top[:, 1]).tolist())
    assert_tokens_agree_where_decided(want, [r.tokens for r in runs[:2]], margins, 1e-3,
                                      at_least=1)
