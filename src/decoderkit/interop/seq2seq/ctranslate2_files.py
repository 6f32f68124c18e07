"""CTranslate2's own files in an export (``config.json``, the vocabularies, ``model.bin``) and
what they must hold: the special tokens, the tokens and the sizes of the manifest's config and
tokenizers, checked when an export is opened (``interop.ctranslate2.Ctranslate2Engine``), so an
export edited behind its manifest is named, not translated with the wrong vocabulary nor
reported as another model."""

from __future__ import annotations

import re
import struct
from pathlib import Path

import numpy as np

from decoderkit.base.errors import UsageError
from decoderkit.base.text import read_json
from decoderkit.interop.artifacts import MANIFEST, export_file
from decoderkit.interop.fields import shown
from decoderkit.nn.seq2seq.model import ModelConfig
from decoderkit.text.seq2seq.tokenizer import Tokenizer

CONFIG = "config.json"  # CTranslate2's settings in an export directory
BINARY_VERSION = 6  # the model.bin layout read here (ctranslate2.specs.model_spec._serialize)
TYPES = ("<f4", "<i1", "<i2", "<i4", "<f2", "<u2")  # its DataType ids (bfloat16: 2 bytes)
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


def read_variables(file: Path) -> tuple[dict[str, tuple[int, ...]], dict[str, float]] | None:
    """(variable -> shape, scalar variable -> value) of CTranslate2's ``model.bin`` (its
    layout ``BINARY_VERSION``; another: None), aliases given their variable's shape; the
    tensors' bytes are skipped, never read. A damaged one is a ``UsageError`` naming it."""
    size = file.stat().st_size
    shapes, scalars = {}, {}
    with file.open("rb") as f:
        def take(fmt: str):
            data = f.read(struct.calcsize(fmt))
            if len(data) != struct.calcsize(fmt):
                raise UsageError(f"{file}: truncated CTranslate2 model (at byte {f.tell()})")
            return struct.unpack(fmt, data)[0]

        def name() -> str:
            return f.read(take("<H"))[:-1].decode("utf-8", "replace")

        if take("<I") != BINARY_VERSION:
            return None  # written by another CTranslate2, which loaded it: not checked here
        name(), take("<I")  # the spec's name and revision
        for _ in range(take("<I")):
            key, shape = name(), tuple(take("<I") for _ in range(take("<B")))
            kind, length = take("<B"), take("<I")
            if kind >= len(TYPES) or f.tell() + length > size:
                raise UsageError(f"{file}: not a CTranslate2 model (variable {key!r})")
            shapes[key] = shape
            if shape == () and length <= 8:
                scalars[key] = float(np.frombuffer(f.read(length), TYPES[kind])[0])
            else:
                f.seek(length, 1)
        for _ in range(take("<I")):
            alias, target = name(), name()
            shapes[alias] = shapes.get(target, ())
    return shapes, scalars


def check_engine_weights(file: Path, config: ModelConfig) -> None:
    """CTranslate2's ``model.bin`` must hold the model of the manifest's ``config``: its layer
    counts, heads, embedding, projection, FFN and position-table shapes; else a
    ``UsageError`` naming the file, the variable and both values."""
    found = read_variables(file)
    if found is None:
        return
    shapes, scalars = found
    c = config
    want = {"encoder/embeddings_0/weight": (c.src_vocab, c.d_model),
            "decoder/embeddings/weight": (c.tgt_vocab, c.d_model),
            "decoder/projection/weight": (c.tgt_vocab, c.d_model),
            "encoder/layer_0/ffn/linear_0/weight": (c.d_ff, c.d_model),
            "decoder/position_encodings/encodings": (c.max_len, c.d_model)}
    for key, shape in want.items():
        if shapes.get(key) != shape:
            raise UsageError(f"{file}: {key} has the shape {shapes.get(key)}, but the config in "
                             f"{MANIFEST} gives {shape}")
    for side in ("encoder", "decoder"):
        layers = len({k.split("/")[1] for k in shapes
                      if re.match(rf"{side}/layer_\d+/", k)})  # not {side}/layer_norm
        heads = scalars.get(f"{side}/num_heads", c.n_heads)
        for what, got, given in (("layers", layers, c.n_layers), ("heads", heads, c.n_heads)):
            if got != given:
                raise UsageError(f"{file}: {side} of {got:g} {what}, but the config in "
                                 f"{MANIFEST} gives n_{what}={given}")
