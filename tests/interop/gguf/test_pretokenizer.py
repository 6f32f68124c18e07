"""The pre-tokenizer name a GGUF export writes (``tokenizer.ggml.pre``), from the tokenizer's
own rules: tiny BPE tokenizers built here with the normalizer and pre-tokenizer sections each
family's tokenizer.json ships (Llama 3's Split regex + ByteLevel without its regex and
ignore_merges; Qwen2's NFC + its Split regex; SmolLM's Digits + ByteLevel; GPT-2's ByteLevel),
trained on a little text and attached to tiny random transformers Llama / Qwen2 directories,
exported by ``lm export --to gguf``: the name read back with gguf's reader and, where
llama-cpp-python is installed, llama.cpp tokenizing texts to the ids ``tokenizers`` gives (and
not with any other name's rules: the texts tell the names apart) and generating our greedy
tokens from its own ids. Rules no name fits are refused in one line."""

from __future__ import annotations

import json
import re
import unicodedata

import pytest
from conftest import assert_tokens_agree_where_decided
from interop import gguf_helpers as h

from decoderkit.base.errors import UsageError
from decoderkit.cli import main
from decoderkit.interop.gguf import writer
from decoderkit.interop.gguf.export import export_gguf
from decoderkit.interop.gguf.pretokenizer import (
    LLAMA3_SPLIT,
    NAMES,
    QWEN2_SPLIT,
    pre_tokenizer_name,
    rules_of,
)
from decoderkit.interop.gguf.writer import FILE
from decoderkit.interop.llama.hf import load_llama

tokenizers = pytest.importorskip("tokenizers")
GGML_BOUND = 2e-4  # test_llama.py's: llama.cpp's float32 log-probabilities against ours
SIZE = 600  # each tokenizer's tokens (bytes, ~340 merges, its special tokens)
ROWS = 640  # the model's vocabulary: the tokenizer's and unused rows


def byte_level(use_regex: bool) -> dict:
    return {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
            "use_regex": use_regex}


def split(regex: str) -> dict:
    return {"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated",
            "invert": False}


# name -> (normalizer, pre_tokenizer, model's ignore_merges, special tokens, transformers model
# case of interop.llama_helpers, tokenizer_config.json): each as the family's files have them
FAMILIES = {
    "llama-bpe": (None, {"type": "Sequence", "pretokenizers": [split(LLAMA3_SPLIT),
                                                               byte_level(False)]},
                  True, ["<|begin_of_text|>", "<|end_of_text|>"], "llama-gqa",
                  {"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>"}),
    "qwen2": ({"type": "NFC"}, {"type": "Sequence", "pretokenizers": [split(QWEN2_SPLIT),
                                                                      byte_level(False)]},
              False, ["<|endoftext|>", "<|im_start|>", "<|im_end|>"], "qwen2-tied",
              {"bos_token": None, "eos_token": "<|endoftext|>"}),
    "smollm": (None, {"type": "Sequence", "pretokenizers": [
        {"type": "Digits", "individual_digits": True}, byte_level(True)]},
               False, ["<|endoftext|>", "<|im_start|>", "<|im_end|>"], "llama-gqa",
               {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>"}),
    "gpt-2": (None, byte_level(True), False, ["<|endoftext|>"], "llama-gqa", None),
}
# what tells the names apart: digit runs, contractions in either case, punctuation before
# letters, spaces and newlines in runs, non-ASCII letters and marks
TRAIN = ["In 2024, 123 of 1999 people said: I'm sure it's 42.", "DON'T you THINK we'll see?",
         "naïve café résumé — Ελληνικά, русский, 日本語のテキスト", "x = f(a, b)  # (note)\n\n",
         "We've 3.14159 and 2718281 and 000123!", "  indented\n\tline...\r\nnext",
         "DON'T WON'T CAN'T (quietly) (note)\n\nnew\n\nline"] * 30
TEXTS = ["In 2024 we had 12345 apples, didn't we?", "SHE'LL say 'hi' -- (quietly)...",
         "naïve café: 日本語 and Ελληνικά\n\nnew paragraph", "   spaces   and\ttabs\r\n",
         "I'M 99.5% sure they'd've 1000000 reasons", "f(x)=[1,2,3]; // done!\n",
         "WON'T (note) it\n\nnew line"]

# (tokenizer, wrong name) whose ids agree on every text, measured: a name whose splits are
# coarser only where the vocabulary has no token across them. Llama 3's rules differ from
# Qwen2's in digit runs (1-3 digits, not 1) and ignore_merges alone, GPT-2's from SmolLM's in
# digit runs (with a space before them) alone, and Qwen2's and SmolLM's vocabularies have no
# multi-digit token (nor a space before a digit) for a run to become
SAME = {("qwen2", "llama-bpe"), ("smollm", "gpt-2")}


def family_tokenizer(name: str):
    """A tokenizers BPE of ``SIZE`` tokens with ``name``'s family's sections, trained on
    ``TRAIN`` through them, its special tokens first (a Llama 3's post-processor adds BOS)."""
    from tokenizers import Tokenizer, processors, trainers

    normalizer, pre, ignore, specials, _, _ = FAMILIES[name]
    spec = json.loads(Tokenizer(tokenizers.models.BPE()).to_str())
    spec |= {"normalizer": normalizer, "pre_tokenizer": pre,
             "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                         "use_regex": True}}
    hf = Tokenizer.from_str(json.dumps(spec))
    alphabet = tokenizers.pre_tokenizers.ByteLevel.alphabet()
    hf.train_from_iterator(TRAIN, trainers.BpeTrainer(
        vocab_size=SIZE, special_tokens=specials, initial_alphabet=alphabet,
        show_progress=False))
    spec = json.loads(hf.to_str())
    spec["model"]["ignore_merges"] = ignore
    hf = Tokenizer.from_str(json.dumps(spec))
    if name == "llama-bpe":
        hf.post_processor = processors.TemplateProcessing(
            single="<|begin_of_text|> $A", special_tokens=[("<|begin_of_text|>", 0)])
    return hf


def directory(name: str, path):
    """A tiny random transformers model of ``name``'s family with the family's tokenizer.json
    and tokenizer_config.json, as a Hugging Face directory has them; returns ``path``."""
    from interop.llama_helpers import save_hf

    *_, case, config = FAMILIES[name]
    save_hf(case, path, seed=1, vocab_size=ROWS, max_position_embeddings=h.CONTEXT)
    family_tokenizer(name).save(str(path / "tokenizer.json"))
    if config is not None:
        (path / "tokenizer_config.json").write_text(json.dumps(config))
    return path


@pytest.fixture(scope="module", params=list(FAMILIES))
def exported(request, tmp_path_factory):
    """(name, its Hugging Face directory, its lm export --to gguf file)."""
    root = tmp_path_factory.mktemp(request.param.replace("-", ""))
    hf = directory(request.param, root / "hf")
    assert main(["lm", "export", "--to", "gguf", "--checkpoint", str(hf), "--out",
                 str(root / "out")]) == 0
    return request.param, hf, root / "out" / FILE


def test_each_familys_rules_get_their_llama_cpp_name(exported):
    name, hf, file = exported
    spec = json.loads((hf / "tokenizer.json").read_text())
    assert rules_of(spec) == NAMES[name] and pre_tokenizer_name(spec) == name
    fields = h.read_back(file)[1]
    assert (fields["tokenizer.ggml.model"], fields["tokenizer.ggml.pre"]) == ("gpt2", name)


def test_llama_cpp_tokenizes_as_tokenizers_does_and_not_under_another_name(exported, tmp_path,
                                                                          monkeypatch):
    name, hf, file = exported
    tokenizer = load_llama(hf)[1]
    want = [tokenizer.encode(t) for t in TEXTS]
    llm = h.llama_cpp_model(file, h.CONTEXT)
    assert [llm.tokenize(t.encode(), add_bos=False, special=False) for t in TEXTS] == want
    prompts = [tokenizer.encode_prompt(t) for t in TEXTS]  # Llama 3's BOS first, as llama.cpp's
    assert [llm.tokenize(t.encode(), add_bos=True, special=False) for t in TEXTS] == prompts
    transformers = pytest.importorskip("transformers")
    theirs = transformers.PreTrainedTokenizerFast(tokenizer_file=str(hf / "tokenizer.json"))
    assert [theirs(t)["input_ids"] for t in TEXTS] == prompts
    assert (prompts[0][0] == 0) == (name == "llama-bpe")
    decomposed = "cafe\u0301 nai\u0308ve"  # llama.cpp applies no normalizer: Qwen2's NFC
    nfc = unicodedata.normalize("NFC", decomposed)  # is the caller's, as for llama.cpp's own
    assert llm.tokenize(nfc.encode(), add_bos=False, special=False) == tokenizer.encode(nfc)
    assert (llm.tokenize(decomposed.encode(), add_bos=False, special=False)
            == tokenizer.encode(decomposed)) == (name != "qwen2")
    for other in set(NAMES) - {name}:  # the texts show a wrong name (SAME: they cannot)
        monkeypatch.setattr(writer, "pre_tokenizer_name", lambda spec, other=other: other)
        path = export_gguf(load_llama(hf)[0], tokenizer, tmp_path / other) / FILE
        wrong = h.llama_cpp_model(path, h.CONTEXT)
        got = [wrong.tokenize(t.encode(), add_bos=False, special=False) for t in TEXTS]
        assert (got == want) == ((name, other) in SAME), other


def test_llama_cpp_generates_our_greedy_tokens_from_its_own_ids(exported):
    _, hf, file = exported
    lm, tokenizer = load_llama(hf)
    llm = h.llama_cpp_model(file, h.CONTEXT)
    prompts = [llm.tokenize(t.encode(), add_bos=True, special=False)[:40] for t in TEXTS]
    assert prompts == [tokenizer.encode_prompt(t)[:40] for t in TEXTS]
    want, margins = h.greedy_with_margins(lm, prompts, 12)
    got = [h.llama_cpp_greedy(llm, p, 12) for p in prompts]
    assert_tokens_agree_where_decided(want, got, margins, GGML_BOUND, at_least=2)


@pytest.mark.parametrize(("change", "found"), [
    (lambda s: s["pre_tokenizer"]["pretokenizers"][0]["pattern"].update(
        Regex=LLAMA3_SPLIT.replace("{1,3}", "{1,2}")), r"\\p\{N\}\{1,2\}"),
    (lambda s: s["model"].update(ignore_merges=False), "ignore_merges=False"),
    (lambda s: s.update(normalizer={"type": "NFKC"}), "normalizer NFKC"),
    (lambda s: s["pre_tokenizer"]["pretokenizers"][1].update(add_prefix_space=True),
     "ByteLevel\\(add_prefix_space=True"),
    (lambda s: s.update(pre_tokenizer={"type": "Metaspace", "replacement": "_"}),
     "pre-tokenizer Metaspace"),
])
def test_rules_no_name_fits_are_refused_in_one_line(tmp_path, capsys, change, found):
    hf = directory("llama-bpe", tmp_path / "hf")
    spec = json.loads((hf / "tokenizer.json").read_text())
    change(spec)
    (hf / "tokenizer.json").write_text(json.dumps(spec))
    assert main(["lm", "export", "--to", "gguf", "--checkpoint", str(hf), "--out",
                 str(tmp_path / "out")]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert len(errors) == 1 and not (tmp_path / "out").exists()
    err = errors[0]
    assert "pre-tokenizer llama.cpp knows (gpt-2, llama-bpe, qwen2, smollm" in err
    assert re.search(found, err), err


def test_qwen2s_rules_without_nfc_and_defaults_of_older_files():
    spec = {"normalizer": None, "model": {"type": "BPE"},
            "pre_tokenizer": {"type": "Sequence", "pretokenizers": [split(QWEN2_SPLIT),
                                                                    byte_level(False)]}}
    with pytest.raises(UsageError, match="has normalizer none, pre-tokenizer Split"):
        pre_tokenizer_name(spec)
    spec["normalizer"] = {"type": "Sequence", "normalizers": [{"type": "NFC"}]}
    assert pre_tokenizer_name(spec) == "qwen2"
    old = {"normalizer": None, "model": {"type": "BPE"},  # GPT-2's file before use_regex
           "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False,
                             "trim_offsets": True}}
    assert pre_tokenizer_name(old) == "gpt-2"
