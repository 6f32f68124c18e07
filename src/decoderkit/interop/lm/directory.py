"""A decoder-only LM's Hugging Face directory, the files beside the config and the weights:
the tokenizer (``tokenizer.json`` through HF ``tokenizers``, with ``tokenizer_config.json``'s
named special tokens and ``add_bos_token`` / ``add_eos_token``) and the generation settings
(``generation_config.json``: the end-of-sequence ids and the sampling defaults,
``generation.lm.defaults``).

transformers' rules (5.x), followed so that a prompt is the ids ``AutoTokenizer`` gives:
with a tokenizer.json, its own post-processor decides what a prompt gets (Llama's puts <s> or
<|begin_of_text|> first) and ``add_bos_token`` / ``add_eos_token`` are not read (transformers
drops them); without one (GPT-2's vocab.json and merges.txt), BOS goes before a prompt and EOS
after it where those say so. A named special token, or an ``added_tokens_decoder`` entry, that
the vocabulary lacks (or holds at another id) is refused: transformers would add it past the
model's rows.
"""

from __future__ import annotations

import os
from pathlib import Path

from tokenizers import processors

from decoderkit.base.checks import POSITIVE, Range, count
from decoderkit.base.errors import UsageError
from decoderkit.base.model_files import model_file
from decoderkit.generation.lm.defaults import NO_DEFAULTS, GenerationDefaults
from decoderkit.interop.fields import check_vocabulary, read_field, shown
from decoderkit.interop.huggingface import CONFIG, read_json
from decoderkit.text.lm.chat import special_tokens
from decoderkit.text.lm.tokenizer import ROLES, LMTokenizer, Specials

GENERATION = "generation_config.json"  # generation settings (transformers' GenerationConfig)
TOKENIZER, TOKENIZER_CONFIG = "tokenizer.json", "tokenizer_config.json"
ID = count(0)  # a token id, before the vocabulary is known


def read_tokenizer(directory: str | Path, vocab_size: int, base: LMTokenizer | None = None,
                   base_file: Path | None = None) -> LMTokenizer | None:
    """The tokenizer of ``directory``: ``base`` (one its format read from its own files,
    ``base_file``: GPT-2's vocab.json and merges.txt), else its tokenizer.json; with its
    tokenizer_config.json's special tokens (the module docstring). None where there is none;
    more tokens than the config's ``vocab_size`` refused."""
    directory = Path(directory)
    tokenizer, file = base, model_file(directory, TOKENIZER)
    if tokenizer is None and os.path.lexists(file):
        tokenizer = LMTokenizer.load(file)
    if tokenizer is None:
        return None
    source = file if base is None else base_file  # where the vocabulary came from
    check_vocabulary(source, tokenizer.hf.get_vocab())
    if tokenizer.vocab_size > vocab_size:
        raise UsageError(f"{source} has {tokenizer.vocab_size} tokens but {CONFIG} says "
                         f"vocab_size={vocab_size}")
    config = directory / TOKENIZER_CONFIG
    if not os.path.lexists(config):
        return tokenizer
    raw = read_json(config)
    if not isinstance(raw, dict):
        raise UsageError(f"{config}: not a JSON object of tokenizer settings")
    return _configured(tokenizer, raw, config, base is not None)


def _configured(tokenizer: LMTokenizer, raw: dict, file: Path, own_files: bool) -> LMTokenizer:
    """``tokenizer`` with the special tokens of ``raw`` (``file``'s), and its BOS/EOS rule
    for a tokenizer read from a format's ``own_files`` (no tokenizer.json)."""
    hf = tokenizer.hf
    for key, entry in (raw.get("added_tokens_decoder") or {}).items():
        content = entry.get("content") if isinstance(entry, dict) else None
        if not key.isdigit() or not isinstance(content, str) or hf.token_to_id(content) != int(key):
            raise UsageError(f"{file}: added_tokens_decoder {key!r}: {shown(entry)} is not the "
                             f"token tokenizer.json has at that id")
    found = special_tokens(file.parent, raw)  # as transformers names them (its defaults)
    named = {role: _token(raw, f"{role}_token", file, hf, found) for role in ROLES}
    adds = {k: read_field(raw, f"add_{k}_token", bool, file, default=None, nullable=True)
            for k in ("bos", "eos")}
    if own_files and any(adds.values()):
        bos, eos = (named[k] if adds[k] else None for k in ("bos", "eos"))
        parts = [f"{bos}:0"] * bool(bos) + ["$A:0"] + [f"{eos}:0"] * bool(eos)
        hf.post_processor = processors.TemplateProcessing(
            single=" ".join(parts), special_tokens=[(t, hf.token_to_id(t)) for t in (bos, eos)
                                                    if t])
    given = any(f"{role}_token" in raw or f"{role}_token" in found for role in ROLES)
    return LMTokenizer(hf, Specials(**named) if given else None)


def _token(raw: dict, key: str, file: Path, hf, found: dict[str, str]) -> str | None:
    """The text of the special token ``key``: ``found``'s (``text.lm.chat.special_tokens``:
    the config's, else special_tokens_map.json's, else the tokenizer class's default). One
    the config gives must be a string, an AddedToken's ``content`` or null, and in the
    vocabulary; a class default the vocabulary lacks is none (transformers would add it)."""
    value = raw.get(key)
    text = value.get("content") if isinstance(value, dict) else value
    if text is not None and not isinstance(text, str):
        raise UsageError(f"{file}: {key} must be a token, {{\"content\": token}} or null, got "
                         f"{shown(value)}")
    text = found.get(key)
    if text is not None and hf.token_to_id(text) is None:
        if key in raw:
            raise UsageError(f"{file}: {key} {text!r} is not in the tokenizer's vocabulary (it "
                             "would be a new id past the model's)")
        return None
    return text


def read_generation(directory: str | Path, vocab_size: int) -> GenerationDefaults:
    """The generation settings of ``directory``'s ``generation_config.json``: ``eos_token_id``
    (``end_ids``), ``do_sample``, ``temperature``, ``top_k``, ``top_p``, ``max_new_tokens``;
    each read with its type and range, a wrong one refused naming the file and the key. Other
    keys are not used. Without that file, config.json's ``eos_token_id`` are the end ids (as
    transformers' ``GenerationConfig.from_model_config``); config.json's is judged by the same
    rule either way."""
    directory = Path(directory)
    config = read_json(directory / CONFIG) if os.path.lexists(directory / CONFIG) else {}
    own = end_ids(config, directory / CONFIG, vocab_size) if isinstance(config, dict) else ()
    file = directory / GENERATION
    if not os.path.lexists(file):
        return GenerationDefaults(CONFIG, own) if own else NO_DEFAULTS
    raw = read_json(file)
    if not isinstance(raw, dict):
        raise UsageError(f"{file}: not a JSON object of generation settings")
    eos = end_ids(raw, file, vocab_size)
    sample = read_field(raw, "do_sample", bool, file, default=None, nullable=True)
    values = {key: read_field(raw, key, want, file, default=None, nullable=True)
              for key, want in (("temperature", POSITIVE), ("top_k", count(0)),
                                ("top_p", Range(False, 0.0, 1.0, low_open=True)),
                                ("max_new_tokens", count(1)))}
    try:
        return GenerationDefaults(GENERATION, eos, greedy=None if sample is None else not sample,
                                  **values)
    except UsageError as err:
        raise UsageError(f"{file}: {err}") from None


def end_ids(raw: dict, file: Path, vocab_size: int) -> tuple[int, ...]:
    """The one rule for ``eos_token_id`` wherever a directory gives it (config.json,
    generation_config.json): an id (an integer >= 0), a list of ids or null, else refused
    naming ``file`` and the value; the ids within ``vocab_size`` (one outside it, which no
    step can generate, is left out: transformers' tiny configs keep GPT-2's 50256)."""
    eos = raw.get("eos_token_id")
    eos = [eos] if eos is None or not isinstance(eos, list) else eos
    if not all(i is None or ID.accepts(i) for i in eos):
        raise UsageError(f"{file}: eos_token_id must be an id (an integer >= 0), a list of ids "
                         f"or null, got {shown(raw.get('eos_token_id'))}")
    return tuple(i for i in eos if i is not None and i < vocab_size)
