"""CTranslate2's own files in an export (``config.json``, the vocabularies) and what they must
hold: the special tokens and the tokens of the manifest's config and tokenizers, checked when
an export is opened (``interop.ctranslate2.Ctranslate2Engine``), so an export edited behind
its manifest is named, not translated with the wrong vocabulary."""

from __future__ import annotations

from pathlib import Path

from decoderkit.base.errors import UsageError
from decoderkit.base.text import read_json
from decoderkit.interop.artifacts import MANIFEST, export_file
from decoderkit.interop.fields import shown
from decoderkit.nn.encoder_decoder import ModelConfig
from decoderkit.training.seq2seq.tokenizer import Tokenizer

CONFIG = "config.json"  # CTranslate2's settings in an export directory
# CTranslate2's vocabulary files -> the sides each holds (shared: both vocabularies are equal)
VOCABULARIES = {"shared_vocabulary.json": ("source", "target"),
                "source_vocabulary.json": ("source",), "target_vocabulary.json": ("target",)}


def special_tokens(tok: Tokenizer, c: ModelConfig) -> dict[str, str]:
    """CTranslate2's config keys of the unk, bos, eos and decoder start tokens -> those target
    tokens, from the config's ids (ours: <unk>, <bos>, <eos>, <bos>; a Marian checkpoint's:
    <unk>, <pad>, </s>, <pad>)."""
    bos, eos = tok.tokens([c.bos_id, c.eos_id])
    return {"unk_token": tok.unk_token, "bos_token": bos, "eos_token": eos,
            "decoder_start_token": bos}


def check_engine_model(directory: Path, config: ModelConfig, src_tok: Tokenizer,
                       tgt_tok: Tokenizer) -> None:
    """CTranslate2's own files in an export must still be the manifest's model: each
    vocabulary (``VOCABULARIES``) the tokenizers' tokens in id order, its ``config.json`` the
    special tokens of the config's ids; else a ``UsageError`` naming the file and both values
    (an export whose vocabulary was shortened, or whose manifest was edited)."""
    for name, sides in VOCABULARIES.items():
        if not (directory / name).exists():
            continue
        file = export_file(directory, name)
        vocab = read_json(file)
        for side in sides:
            tok = src_tok if side == "source" else tgt_tok
            want = tok.tokens(range(tok.vocab_size))
            if not isinstance(vocab, list) or len(vocab) != len(want):
                size = len(vocab) if isinstance(vocab, list) else type(vocab).__name__
                raise UsageError(f"{file} holds {size} tokens, but {MANIFEST} gives a {side} "
                                 f"vocabulary of {len(want)}")
            wrong = next((i for i, (a, b) in enumerate(zip(vocab, want, strict=True))
                          if a != b), None)
            if wrong is not None:
                raise UsageError(f"{file}: token {wrong} is {shown(vocab[wrong])}, but the "
                                 f"{side} tokenizer has {want[wrong]!r}")
    file = export_file(directory, CONFIG)
    settings = read_json(file)
    for key, want in special_tokens(tgt_tok, config).items():
        if not isinstance(settings, dict) or settings.get(key) != want:
            got = settings.get(key) if isinstance(settings, dict) else settings
            raise UsageError(f"{file}: {key} is {shown(got)}, but {MANIFEST}'s config gives "
                             f"{want!r}")
