"""The encoder-decoder exports' manifest: ``decoderkit.json`` (the engine, the weight type and
our ``ModelConfig``) beside the two tokenizers, so an export translates text without the
checkpoint (what every export shares, family or not: ``artifacts``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from decoderkit.base.errors import UsageError
from decoderkit.base.files import write_atomic
from decoderkit.base.text import read_json
from decoderkit.interop.artifacts import MANIFEST, export_file
from decoderkit.nn.seq2seq.model import ModelConfig
from decoderkit.training.checkpoint_dir import existing, verify
from decoderkit.training.seq2seq.checkpoint import SRC_TOKENIZER, TGT_TOKENIZER, Checkpoint
from decoderkit.training.seq2seq.prepare import relocated_data
from decoderkit.text.seq2seq.tokenizer import Tokenizer

MANIFEST_KEYS = ("engine", "weights", "config")  # what every manifest holds


def write_manifest(directory: Path, engine: str, weights: str, ckpt: Checkpoint) -> None:
    """The manifest and both tokenizers, into an export directory being written. The manifest
    keeps the checkpoint's data settings, so ``eval`` finds the same held-out pairs."""
    manifest = {"engine": engine, "weights": weights, "config": ckpt.config.to_dict(),
                **relocated_data(ckpt.meta, ckpt.path, directory), "step": ckpt.step}
    for key in ("generation", "origin"):  # a Hugging Face directory's own decoding defaults
        if key in ckpt.meta:  # and where the model came from (its beam rule)
            manifest[key] = ckpt.meta[key]
    write_atomic(directory / MANIFEST, lambda tmp: tmp.write_text(json.dumps(manifest, indent=2)))
    ckpt.src_tokenizer.save(directory / SRC_TOKENIZER)
    ckpt.tgt_tokenizer.save(directory / TGT_TOKENIZER)



def read_manifest(directory: str | Path, engine: str, required: tuple[str, ...] = (),
                  ) -> tuple[dict, ModelConfig, Tokenizer, Tokenizer]:
    """(manifest, config, source tokenizer, target tokenizer) of an export made for ``engine``,
    every file checked: each name it lists inside the export and a regular file
    (``export_file``), the tokenizers and the engine's ``required`` files among them, a
    regular file of sane size, its recorded checksum (exports since 0.2), the manifest a JSON
    object with its keys, tokenizers of the config's sizes. Anything damaged is one
    ``UsageError`` naming the file."""
    directory = Path(directory)
    file = directory / MANIFEST
    if not os.path.lexists(file):
        raise UsageError(f"{directory} is not a decoderkit export (no {MANIFEST}); make one "
                         f"with decoderkit export --to {engine}")
    manifest = read_json(existing(file))
    if not isinstance(manifest, dict):
        raise UsageError(f"{file}: expected a JSON object, got {type(manifest).__name__}")
    missing = [k for k in MANIFEST_KEYS if k not in manifest]
    if missing:
        raise UsageError(f"{file}: no {', '.join(map(repr, missing))} (not a complete "
                         "decoderkit export manifest)")
    if manifest["engine"] != engine:
        raise UsageError(f"{directory} was exported for {manifest['engine']!r}, "
                         f"not for --engine {engine}")
    files = manifest.get("files", [])
    if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
        raise UsageError(f"{file}: 'files' must list the export's file names")
    for name in files:  # every name inside the export and a regular file, before any hash
        export_file(directory, name)
    missing = [f for f in (*required, SRC_TOKENIZER, TGT_TOKENIZER) if "files" in manifest
               and f not in files]
    if missing:
        raise UsageError(f"{file} does not list {missing[0]}, a file of every {engine} export "
                         "(the manifest was edited?)")
    verify(directory, manifest, [f for f in files if f != MANIFEST], record=MANIFEST)
    if not isinstance(manifest["config"], dict):
        raise UsageError(f"{file}: 'config' must be a JSON object")
    try:
        config = ModelConfig.from_dict(manifest["config"])
    except (ValueError, TypeError) as err:
        raise UsageError(f"{file}: bad 'config' ({err})") from None
    tokenizers = [Tokenizer.load(export_file(directory, name))
                  for name in (SRC_TOKENIZER, TGT_TOKENIZER)]
    for name, tok, size in zip((SRC_TOKENIZER, TGT_TOKENIZER), tokenizers,
                               (config.src_vocab, config.tgt_vocab), strict=True):
        if tok.vocab_size != size:
            raise UsageError(f"{directory / name} has {tok.vocab_size} tokens but {MANIFEST} "
                             f"gives a model of {size}")
    return manifest, config, tokenizers[0], tokenizers[1]
