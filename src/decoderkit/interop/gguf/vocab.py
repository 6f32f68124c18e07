"""A GGUF file's tokenizer, end-of-text ids and chat template, from its ``tokenizer.*`` keys.

The tokenizer is rebuilt as an HF ``tokenizers`` byte-level BPE (``tokenizer.ggml.model``
"gpt2"): the tokens (ids in order) and merges, the normalizer and pre-tokenizer of the name
``tokenizer.ggml.pre`` gives (``interop.gguf.pretokenizer.SPECS``, the table the export writes
the name from: gpt-2, llama-bpe, qwen2, smollm), control tokens as special added tokens and
user-defined ones as added tokens (llama.cpp matches both in a text), unused ones past the last
used left out (the padding rows converters add: no id the tokenizer makes), BOS put before a
prompt and EOS after it as ``add_bos_token`` / ``add_eos_token`` say (absent: llama.cpp's
defaults, BOS for llama-bpe alone). The named special tokens (BOS, EOS, unknown, padding) come
from their ``*_token_id`` keys; a model ends at every id of the eos, eot and eom keys
(llama.cpp's keyed ends). A SentencePiece vocabulary (``llama``: Llama 2, Mistral 7B v0.1) or
any other kind is refused naming it, as is a pre-tokenizer name the table lacks. The chat
template is ``tokenizer.chat_template``, rendered in the sandbox like any other
(``ChatTemplate``).
"""

from __future__ import annotations

import json
from collections.abc import Callable

from tokenizers import Tokenizer as HFTokenizer

from decoderkit.base.errors import UsageError
from decoderkit.interop.fields import read_field
from decoderkit.interop.gguf.pretokenizer import SPECS, byte_level_spec
from decoderkit.interop.gguf.reader import Header
from decoderkit.interop.gguf.writer import CONTROL, END_KEYS, NORMAL, UNUSED, USER_DEFINED
from decoderkit.text.lm.chat import ChatTemplate
from decoderkit.text.lm.tokenizer import LMTokenizer, Specials

KEY = "tokenizer.ggml."
TEMPLATE = "tokenizer.chat_template"
BPE, SENTENCEPIECE = "gpt2", "llama"  # tokenizer.ggml.model's byte-level BPE, SentencePiece
ROLES = {"bos": "bos", "eos": "eos", "unk": "unknown", "pad": "padding"}  # role -> key word
DEFAULT_BOS = ("llama-bpe",)  # the names llama.cpp puts BOS first for where no key says


def gguf_tokenizer(header: Header, vocab_size: int) -> LMTokenizer | None:
    """The tokenizer of the file (None where it has no ``tokenizer.ggml.model``); more tokens
    than the model's ``vocab_size`` rows refused."""
    f, file = header.fields, header.file
    kind = read_field(f, KEY + "model", str, file, default=None, nullable=True)
    if kind is None:
        return None
    if kind != BPE:
        what = "a SentencePiece vocabulary (Llama 2's, Mistral 7B v0.1's)" \
            if kind == SENTENCEPIECE else "a tokenizer"
        raise UsageError(f"{file}: {KEY}model is {kind!r}, {what} decoderkit does not read "
                         f"(it reads {BPE!r}: byte-level BPE)")
    tokens = _strings(f, KEY + "tokens", file)
    if len(tokens) > vocab_size:
        raise UsageError(f"{file}: {KEY}tokens holds {len(tokens)} tokens, more than the "
                         f"model's {vocab_size} rows")
    pre = read_field(f, KEY + "pre", str, file, default="default")
    if pre not in SPECS:
        raise UsageError(f"{file}: {KEY}pre is {pre!r}, a pre-tokenizer decoderkit does not "
                         f"have (it has {', '.join(SPECS)})")
    types = _types(f, len(tokens), file)
    used = len(tokens)
    while used and types[used - 1] == UNUSED:  # rows past the tokenizer's ([PADi]): none of
        used -= 1  # its ids, as a directory's tokenizer.json smaller than the model's rows
    tokens, types = tokens[:used], types[:used]
    ids = {role: _id(f, f"{KEY}{word}_token_id", len(tokens), file)
           for role, word in ROLES.items()}
    hf = _build(tokens, types, f, pre, ids, file)
    return LMTokenizer(hf, Specials(**{r: None if i is None else tokens[i]
                                       for r, i in ids.items()}))


def end_ids(header: Header) -> tuple[int, ...]:
    """The ids of every end-of-generation key (eos, eot, eom) the file has."""
    n = len(header.fields.get(KEY + "tokens") or ())
    found = (_id(header.fields, f"{KEY}{key}_token_id", n, header.file) for key in END_KEYS)
    return tuple(dict.fromkeys(i for i in found if i is not None))


def gguf_chat_template(header: Header, tokenizer: LMTokenizer | None
                       ) -> Callable[[], ChatTemplate | None]:
    """How to build ``tokenizer.chat_template`` (BOS and EOS texts its variables): the field
    read and checked now, compiled at the call (None where the file has none)."""
    source = read_field(header.fields, TEMPLATE, str, header.file, default=None, nullable=True)
    named = tokenizer.named if tokenizer is not None else Specials()
    special = {f"{r}_token": getattr(named, r) for r in ("bos", "eos", "unk", "pad")
               if getattr(named, r) is not None}
    where = f"{header.file}: {TEMPLATE}"
    return lambda: None if source is None else ChatTemplate(source, special, where)


def _types(f: dict, n: int, file) -> list[int]:
    """``tokenizer.ggml.token_type``: one type per token (absent: all normal)."""
    types = f.get(KEY + "token_type", [NORMAL] * n)
    if not isinstance(types, list) or len(types) != n:
        got = len(types) if isinstance(types, list) else repr(types)
        raise UsageError(f"{file}: {KEY}token_type must list one type per token ({n}), got "
                         f"{got}")
    return types


def _build(tokens: list[str], types: list[int], f: dict, pre: str, ids: dict, file
           ) -> HFTokenizer:
    """The HF tokenizer of ``tokens`` and the file's merges, types and BOS/EOS rule."""
    vocab = {}
    for i, token in enumerate(tokens):
        if vocab.setdefault(token, i) != i:
            raise UsageError(f"{file}: {KEY}tokens holds {token!r} twice (ids {vocab[token]} "
                             f"and {i})")
    merges = []
    for i, merge in enumerate(_strings(f, KEY + "merges", file, default=[])):
        pair = merge.split(" ")
        if len(pair) != 2 or not all(p in vocab for p in pair):
            raise UsageError(f"{file}: {KEY}merges item {i} {merge!r} is not two tokens of the "
                             "vocabulary")
        merges.append(pair)
    added = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": types[i] == CONTROL}
             for i, t in enumerate(tokens) if types[i] in (CONTROL, USER_DEFINED)]
    spec = SPECS[pre]
    tokenizer = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
                 "normalizer": spec["normalizer"], "pre_tokenizer": spec["pre_tokenizer"],
                 "post_processor": _post_processor(f, pre, ids, tokens, file),
                 "decoder": byte_level_spec(True, True) | {"type": "ByteLevel"},
                 "model": {"type": "BPE", "dropout": None, "unk_token": None,
                           "continuing_subword_prefix": None, "end_of_word_suffix": None,
                           "fuse_unk": False, "byte_fallback": False,
                           "ignore_merges": spec["ignore_merges"], "vocab": vocab,
                           "merges": merges}}
    try:
        return HFTokenizer.from_str(json.dumps(tokenizer))
    except Exception as err:  # the Rust parser raises a bare Exception
        raise UsageError(f"{file}: its tokenizer does not build ({err})") from None


def _post_processor(f: dict, pre: str, ids: dict, tokens: list[str], file) -> dict | None:
    """BOS before and EOS after a prompt, as ``add_bos_token`` / ``add_eos_token`` say."""
    adds = {r: read_field(f, f"{KEY}add_{r}_token", bool, file, default=r == "bos" and pre in
                          DEFAULT_BOS) for r in ("bos", "eos")}
    parts = [r for r in ("bos", "eos") if adds[r] and ids[r] is not None]
    if not parts:
        return None
    single = [{"SpecialToken": {"id": tokens[ids["bos"]], "type_id": 0}}] * ("bos" in parts) + \
        [{"Sequence": {"id": "A", "type_id": 0}}] + \
        [{"SpecialToken": {"id": tokens[ids["eos"]], "type_id": 0}}] * ("eos" in parts)
    special = {tokens[ids[r]]: {"id": tokens[ids[r]], "ids": [ids[r]], "tokens": [tokens[ids[r]]]}
               for r in parts}
    pair = single + [{"Sequence": {"id": "B", "type_id": 1}}]
    return {"type": "TemplateProcessing", "single": single, "pair": pair,
            "special_tokens": special}


def _strings(f: dict, key: str, file, default: object = None) -> list[str]:
    """The list of strings under ``key`` (``default`` where absent; None: required)."""
    value = f.get(key, default)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise UsageError(f"{file}: {key} must be an array of strings"
                         + (" (it is missing)" if value is None else ""))
    return value


def _id(f: dict, key: str, n: int, file) -> int | None:
    """The token id under ``key`` (None where absent), one of the ``n`` tokens."""
    value = f.get(key)
    if value is not None and (type(value) is not int or not 0 <= value < n):
        raise UsageError(f"{file}: {key} is {value!r}, not the id of one of its {n} tokens")
    return value
