"""The pre-tokenizer name llama.cpp knows (``tokenizer.ggml.pre``) of a byte-level BPE
tokenizer, read from the tokenizer's own rules in its tokenizer.json, not from a hash of its
output as llama.cpp's converter finds it (which refuses every tokenizer a user trained).

llama.cpp splits a text by a fixed list of regexes per name (llama-vocab.cpp) and applies no
normalizer; a name fits a tokenizer when the tokenizer's normalizer, its pre-tokenizer steps
(each step's type and the options that change the ids: a Split's regex, compared as an exact
string, its behaviour and inversion; ByteLevel's prefix space and own regex; Digits' single
digits) and its BPE model's ``ignore_merges`` are those the family ships (``NAMES``). The Split
regexes are the ones llama.cpp's sources quote as the tokenizer.json original of each name.
Offsets-only options (``trim_offsets``) are ignored: they do not change the ids."""

from __future__ import annotations

import json
from dataclasses import dataclass

from decoderkit.base.errors import UsageError

# Llama 3's Split regex (llama.cpp: llama-bpe, its LLAMA3 pre-type); digits in runs of 1-3
LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# Qwen2's, Qwen2.5's and Qwen3's (llama.cpp: qwen2): Llama 3's with single digits
QWEN2_SPLIT = LLAMA3_SPLIT.replace(r"\p{N}{1,3}", r"\p{N}")


def byte_level(use_regex: bool, prefix_space: bool = False) -> tuple[str, ...]:
    """A ByteLevel step: with or without GPT-2's own regex, a space put before the text."""
    return ("ByteLevel", f"add_prefix_space={prefix_space}", f"use_regex={use_regex}")


def split(pattern: str, behavior: str = "Isolated", invert: bool = False) -> tuple[str, ...]:
    """A Split step on ``pattern`` (``regex=...``); ``Isolated``: each match its own piece."""
    return ("Split", pattern, f"behavior={behavior!r}", f"invert={invert}")


@dataclass(frozen=True)
class Rules:
    """What decides a BPE tokenizer's pieces, as tokenizer.json states it."""

    normalizer: tuple[str, ...]  # the normalizers' types, in order (Qwen2's NFC)
    steps: tuple[tuple[str, ...], ...]  # the pre-tokenizer's steps: type, then its options
    ignore_merges: bool  # a piece the vocabulary holds is one token, unmerged (Llama 3's)

    def __str__(self) -> str:
        steps = ", ".join(f"{s[0]}({', '.join(s[1:])})" for s in self.steps) or "none"
        return (f"normalizer {'+'.join(self.normalizer) or 'none'}, pre-tokenizer {steps}, "
                f"ignore_merges={self.ignore_merges}")


def byte_level_spec(prefix_space: bool, use_regex: bool) -> dict:
    """tokenizer.json's ByteLevel pre-tokenizer (``byte_level``'s step)."""
    return {"type": "ByteLevel", "add_prefix_space": prefix_space, "trim_offsets": True,
            "use_regex": use_regex}


def split_spec(regex: str) -> dict:
    """tokenizer.json's Split on ``regex``, each match its own piece (``split``'s step)."""
    return {"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated",
            "invert": False}


def _sequence(*steps: dict) -> dict:
    return {"type": "Sequence", "pretokenizers": list(steps)}


# llama.cpp's name -> the tokenizer.json parts of the tokenizers it names so
# (convert_hf_to_gguf_update.py: gpt-2 openai-community/gpt2, llama-bpe
# meta-llama/Meta-Llama-3-8B, qwen2 Qwen/Qwen1.5-7B and the Qwen2.5 / Qwen3 tokenizers, smollm
# HuggingFaceTB/SmolLM-135M, SmolLM2's alike): what the export checks a tokenizer against and
# what a GGUF file's tokenizer is rebuilt with (``interop.gguf.vocab``)
SPECS = {
    "gpt-2": {"normalizer": None, "pre_tokenizer": byte_level_spec(False, True),
              "ignore_merges": False},
    "llama-bpe": {"normalizer": None, "pre_tokenizer": _sequence(
        split_spec(LLAMA3_SPLIT), byte_level_spec(False, False)), "ignore_merges": True},
    "qwen2": {"normalizer": {"type": "NFC"}, "pre_tokenizer": _sequence(
        split_spec(QWEN2_SPLIT), byte_level_spec(False, False)), "ignore_merges": False},
    "smollm": {"normalizer": None, "pre_tokenizer": _sequence(
        {"type": "Digits", "individual_digits": True}, byte_level_spec(False, True)),
        "ignore_merges": False},
}


def rules_of(spec: dict) -> Rules:
    """The rules of a parsed tokenizer.json ``spec`` (tokenizers' defaults where a key is
    absent, as the library reads the file)."""
    return Rules(tuple(n.get("type") for n in _flat(spec.get("normalizer"), "normalizers")),
                 tuple(_step(s) for s in _flat(spec.get("pre_tokenizer"), "pretokenizers")),
                 bool(spec["model"].get("ignore_merges", False)))


def pre_tokenizer_name(spec: dict) -> str:
    """llama.cpp's name of the pre-tokenizer of a parsed tokenizer.json ``spec``; rules no
    name fits are refused in one line naming them and llama.cpp's names."""
    rules = rules_of(spec)
    for name, want in NAMES.items():
        if rules == want:
            return name
    raise UsageError(f"GGUF export needs a pre-tokenizer llama.cpp knows ({', '.join(NAMES)}: "
                     f"GPT-2's, Llama 3's, Qwen2's, SmolLM's rules); this tokenizer has "
                     f"{rules}: llama.cpp would split its text otherwise")


def _flat(section: dict | None, key: str) -> list[dict]:
    """A normalizer or pre-tokenizer section as its list of steps (a Sequence flattened)."""
    if section is None:
        return []
    if section.get("type") == "Sequence":
        return [s for part in section.get(key, []) for s in _flat(part, key)]
    return [section]


def _step(step: dict) -> tuple[str, ...]:
    """A pre-tokenizer step as its type and the options that change the ids."""
    kind = step.get("type")
    if kind == "ByteLevel":
        return byte_level(step.get("use_regex", True), step.get("add_prefix_space", True))
    if kind == "Split":
        pattern = step.get("pattern", {})
        text = f"regex={pattern['Regex']!r}" if "Regex" in pattern else \
            f"string={pattern.get('String')!r}"
        return split(text, step.get("behavior"), step.get("invert", False))
    if kind == "Digits":
        return ("Digits", f"individual_digits={step.get('individual_digits', False)}")
    rest = {k: v for k, v in step.items() if k != "type"}
    return (str(kind), json.dumps(rest, sort_keys=True))


# llama.cpp's name -> the rules of its tokenizers
NAMES = {name: rules_of({"normalizer": spec["normalizer"], "pre_tokenizer":
                         spec["pre_tokenizer"], "model": {"ignore_merges": spec["ignore_merges"]}})
         for name, spec in SPECS.items()}
