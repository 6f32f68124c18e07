"""interop.lm.export: an exported LM directory tokenizes every text to our ids in
transformers (AutoTokenizer), names our special tokens, and stops where we stop
(generation_config.json)."""

from __future__ import annotations

import json

import pytest
import torch

from decoderkit.generation.lm.defaults import NO_DEFAULTS, GenerationDefaults
from decoderkit.interop.checkpoints import load_checkpoint
from decoderkit.interop.gpt.hf import export_transformers
from decoderkit.nn.lm.model import DecoderOnlyLM, LMConfig
from decoderkit.text.lm.tokenizer import END_OF_TEXT, LMTokenizer, Specials

transformers = pytest.importorskip("transformers")
CORPUS = "To be, or not to be: that is the question.\n\tWhether 'tis nobler — café, naïve! "
TEXTS = ["To be", "  two  spaces\n\nand\ttabs  ", "naïve café — 日本語 ✓ 🎭", "<|endoftext|>",
         "be<|endoftext|>or not<|endoftext|>", "<unk>", "x" * 50, "\n", "é"]


def tokenizers_of_every_kind():
    """A trained BPE (no special token), one with <|endoftext|>, characters, and a BPE with
    its own BOS, EOS and padding named."""
    plain = LMTokenizer.train_bpe([CORPUS] * 4, 300)
    eot = LMTokenizer.train_bpe([CORPUS] * 4, 300)
    eot.hf.add_special_tokens([END_OF_TEXT])
    named = LMTokenizer.train_bpe([CORPUS] * 4, 300)
    named.hf.add_special_tokens(["<s>", "</s>", "<pad>"])
    named = LMTokenizer(named.hf, Specials(bos="<s>", eos="</s>", pad="<pad>"))
    chars = LMTokenizer.characters(CORPUS + "".join(TEXTS))
    return {"bpe": plain, "bpe+eot": eot, "bpe+named": named, "chars": chars}


def exported(tmp_path, tokenizer, generation=NO_DEFAULTS):
    torch.manual_seed(0)
    model = DecoderOnlyLM(LMConfig(vocab_size=tokenizer.vocab_size + 3, n_layers=1, d_model=16,
                                   n_heads=2, d_ff=32, max_len=64)).eval()
    return export_transformers(model, tokenizer, tmp_path / "hf", generation=generation)


@pytest.mark.parametrize("kind", ["bpe", "bpe+eot", "bpe+named", "chars"])
def test_transformers_tokenizes_every_text_to_our_ids(tmp_path, kind):
    ours = tokenizers_of_every_kind()[kind]
    out = exported(tmp_path, ours)
    theirs = transformers.AutoTokenizer.from_pretrained(out)
    assert len(theirs) == ours.vocab_size  # nothing invented past the vocabulary
    for text in TEXTS:
        if ours.missing_characters(text):
            continue
        assert theirs(text).input_ids == ours.encode_prompt(text), (kind, text)
        assert theirs.decode(theirs(text).input_ids) == ours.decode(ours.encode(text)), text
    for role in ("bos", "eos", "unk", "pad"):
        assert getattr(theirs, f"{role}_token_id") == ours.special_id(role), role
    again = load_checkpoint(out).tokenizer  # and back: the same tokenizer, the same specials
    assert again.named == ours.named
    assert all(again.encode_prompt(t) == ours.encode_prompt(t) for t in TEXTS
               if not ours.missing_characters(t))


def test_the_end_ids_and_the_sampling_defaults_go_with_the_model(tmp_path):
    ours = tokenizers_of_every_kind()["bpe+named"]
    extra = ours.hf.token_to_id("<pad>")
    defaults = GenerationDefaults("generation_config.json", (extra,), greedy=False,
                                  temperature=0.6, top_p=0.9, top_k=20, max_new_tokens=40)
    out = exported(tmp_path, ours, defaults)
    config = transformers.GenerationConfig.from_pretrained(out)
    eos = ours.special_id("eos")
    assert sorted(config.eos_token_id) == sorted({eos, extra}) and config.do_sample
    assert (config.temperature, config.top_p, config.top_k, config.max_new_tokens) == (
        0.6, 0.9, 20, 40)
    model = json.loads((out / "config.json").read_text())
    assert model["bos_token_id"] == ours.special_id("bos") and \
        sorted(model["eos_token_id"]) == sorted({eos, extra})
    back = load_checkpoint(out)
    assert back.end_ids == {eos, extra}
    assert (back.generation.temperature, back.generation.top_k) == (0.6, 20)
    plain = exported(tmp_path / "plain", tokenizers_of_every_kind()["bpe"])
    assert json.loads((plain / "generation_config.json").read_text())["eos_token_id"] is None
