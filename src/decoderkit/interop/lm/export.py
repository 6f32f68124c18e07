"""A decoder-only LM written as a Hugging Face directory, what every architecture's export
shares (GPT-2's ``interop.gpt.hf``, Llama's): the weights and config.json it is given, and
beside them the whole tokenizer and the generation settings, so that transformers tokenizes
every text to our ids and stops where we stop.

- ``tokenizer.json``: the tokenizer itself (its special tokens among its added tokens);
- ``tokenizer_config.json``: the generic ``PreTrainedTokenizerFast`` class (a model class's
  own tokenizer, GPT-2's, would invent an ``<|endoftext|>`` our vocabulary may lack, as an id
  past the model's rows), each named special token or null, the context length, no clean-up
  of spaces on decoding (ours keeps them);
- ``special_tokens_map.json``: the named special tokens;
- ``generation_config.json``: ``eos_token_id`` (every end id: one int, or a list), the BOS id,
  and the sampling defaults the model came with;
- config.json's ``bos_token_id`` / ``eos_token_id`` the same ids;
- ``chat_template.jinja``: the source's chat template, where it has one (where transformers
  5 writes it and reads it first: ``serve``'s Chat Completions and ``lm chat`` on the export
  chat as on the source).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file

from decoderkit.base.files import write_atomic
from decoderkit.generation.lm.defaults import NO_DEFAULTS, GenerationDefaults
from decoderkit.interop.artifacts import MANIFEST, write_directory
from decoderkit.interop.huggingface import CONFIG, SAFETENSORS
from decoderkit.interop.lm.directory import GENERATION, TOKENIZER, TOKENIZER_CONFIG
from decoderkit.text.lm.chat import TEMPLATE_FILE
from decoderkit.text.lm.tokenizer import ROLES, LMTokenizer

TOKENIZER_CLASS = "PreTrainedTokenizerFast"  # the generic class: no special token of its own
SPECIAL_TOKENS_MAP = "special_tokens_map.json"


def special_ids(tokenizer: LMTokenizer | None, generation: GenerationDefaults) -> dict:
    """config.json's and generation_config.json's ``bos_token_id`` and ``eos_token_id``: the
    tokenizer's BOS, and every end id (one: an int; several: a sorted list; none: null)."""
    bos = None if tokenizer is None else tokenizer.special_id("bos")
    ends = sorted(generation.end_ids(tokenizer))
    return {"bos_token_id": bos, "eos_token_id": ends[0] if len(ends) == 1 else ends or None}


def tokenizer_files(tokenizer: LMTokenizer, context: int) -> dict[str, dict]:
    """File name -> JSON of the tokenizer's settings files (the module docstring)."""
    named = {f"{role}_token": getattr(tokenizer.named, role) for role in ROLES}
    return {TOKENIZER_CONFIG: {"tokenizer_class": TOKENIZER_CLASS, **named,
                               "model_max_length": context,
                               "clean_up_tokenization_spaces": False},
            SPECIAL_TOKENS_MAP: {k: v for k, v in named.items() if v is not None}}


def generation_file(tokenizer: LMTokenizer | None, generation: GenerationDefaults) -> dict:
    """generation_config.json: the end and BOS ids, and the sampling defaults there are."""
    out = special_ids(tokenizer, generation)
    if generation.greedy is not None:
        out["do_sample"] = not generation.greedy
    for key in ("temperature", "top_k", "top_p", "max_new_tokens"):
        if getattr(generation, key) is not None:
            out[key] = getattr(generation, key)
    return out


def write_lm_directory(out: str | Path, overwrite: bool, tensors: dict[str, torch.Tensor],
                       hf_config: dict, tokenizer: LMTokenizer | None, manifest: dict, *,
                       context: int, generation: GenerationDefaults | None,
                       chat_template: str | None = None) -> Path:
    """``out`` holding model.safetensors, config.json (its special ids set), the tokenizer's
    files (when one is given; ``context``: the model's length), generation_config.json
    (unless ``generation`` is None: a classifier generates nothing), chat_template.jinja
    (with a ``chat_template``) and the manifest, written atomically
    (``interop.artifacts.write_directory``)."""
    files = {CONFIG: hf_config | special_ids(tokenizer, generation or NO_DEFAULTS)}
    if generation is not None:
        files[GENERATION] = generation_file(tokenizer, generation)
    if tokenizer is not None:
        files |= tokenizer_files(tokenizer, context)
    files[MANIFEST] = manifest

    def fill(tmp: Path) -> None:
        save_file(tensors, str(tmp / SAFETENSORS), metadata={"format": "pt"})
        if tokenizer is not None:
            tokenizer.save(tmp / TOKENIZER)
        texts = {name: json.dumps(value, indent=2) for name, value in files.items()}
        if chat_template is not None:
            texts[TEMPLATE_FILE] = chat_template
        for name, text in texts.items():
            write_atomic(tmp / name, lambda f, text=text: f.write_text(text, encoding="utf-8"))

    return write_directory(out, overwrite, fill)
