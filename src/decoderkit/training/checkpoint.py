"""Checkpoints: one directory holding everything needed to translate with, or resume, a run.

Layout of a checkpoint directory ``DIR``::

    model.safetensors    weights (tied weights stored once)
    config.json          the ModelConfig
    src_tokenizer.json   Hugging Face tokenizer files (see ``decoderkit.tokenizer``)
    tgt_tokenizer.json
    meta.json            step, training settings, validation history
    trainer.pt           optimiser, scheduler, RNG and early-stop state (resume only)

Stable API (used by ``translate`` and ``figures``)::

    ckpt = load_checkpoint(DIR)        # -> Checkpoint
    ckpt.model                         # EncoderDecoder, eval mode
    ckpt.config                        # ModelConfig
    ckpt.src_tokenizer / tgt_tokenizer # .encode(text) -> ids (no bos/eos), .decode(ids) -> str,
                                       # .tokens(ids) -> list[str]
    ckpt.step, ckpt.meta, ckpt.path
    ckpt.trainer_state()               # dict for resuming, or None

A save writes a complete sibling ``DIR.tmp`` and swaps it in with two renames, so a crash never
leaves a half-written checkpoint: if it strikes between the renames, ``DIR.old`` (the previous
complete checkpoint) is found and used.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import load_model, save_model

from decoderkit.base.errors import UsageError
from decoderkit.nn.model import EncoderDecoder, ModelConfig
from decoderkit.training.tokenizer import Tokenizer

WEIGHTS, CONFIG, META, TRAINER = "model.safetensors", "config.json", "meta.json", "trainer.pt"
SRC_TOKENIZER, TGT_TOKENIZER = "src_tokenizer.json", "tgt_tokenizer.json"


@dataclass
class Checkpoint:
    """A loaded checkpoint; ``model`` is in eval mode on the requested device."""

    model: EncoderDecoder
    config: ModelConfig
    src_tokenizer: Tokenizer
    tgt_tokenizer: Tokenizer
    step: int
    path: Path
    meta: dict = field(default_factory=dict)

    def trainer_state(self) -> dict | None:
        """Optimiser/scheduler/RNG state saved for resuming, or None if absent."""
        file = self.path / TRAINER
        if not file.exists():
            return None
        try:
            return torch.load(file, map_location="cpu", weights_only=True)
        except Exception as err:  # truncated or foreign pickle
            raise UsageError(f"{file}: unreadable trainer state ({err})") from None


def save_checkpoint(directory: str | Path, model: EncoderDecoder, src_tokenizer: Tokenizer,
                    tgt_tokenizer: Tokenizer, *, step: int, meta: dict | None = None,
                    trainer_state: dict | None = None) -> Path:
    """Write a complete checkpoint to ``directory`` (replacing the previous one atomically)."""
    final = Path(directory)
    tmp, old = _sibling(final, ".tmp"), _sibling(final, ".old")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    save_model(model, str(tmp / WEIGHTS))
    model.config.save(tmp / CONFIG)
    src_tokenizer.save(tmp / SRC_TOKENIZER)
    tgt_tokenizer.save(tmp / TGT_TOKENIZER)
    (tmp / META).write_text(json.dumps({"step": step, **(meta or {})}, indent=2))
    if trainer_state is not None:
        torch.save(trainer_state, tmp / TRAINER)
    if final.exists():
        shutil.rmtree(old, ignore_errors=True)
        final.rename(old)
    tmp.rename(final)
    shutil.rmtree(old, ignore_errors=True)
    return final


def has_checkpoint(directory: str | Path) -> bool:
    """True if ``directory`` (or its ``.old`` fallback) holds a checkpoint."""
    return _resolve(Path(directory)) is not None


def load_checkpoint(directory: str | Path, map_location: str | torch.device = "cpu",
                    ) -> Checkpoint:
    """Load the checkpoint in ``directory``; bad or mismatched files raise one clear error."""
    path = _resolve(Path(directory))
    if path is None:
        raise UsageError(f"no checkpoint in {directory} (expected {directory}/{WEIGHTS})")
    try:
        config = ModelConfig.from_dict(json.loads(_existing(path / CONFIG).read_text()))
    except (ValueError, TypeError) as err:  # bad JSON, unknown/missing/invalid field
        raise UsageError(f"{path / CONFIG}: {err}") from None
    src_tok = Tokenizer.load(_existing(path / SRC_TOKENIZER))
    tgt_tok = Tokenizer.load(_existing(path / TGT_TOKENIZER))
    for name, tok, size in (("src", src_tok, config.src_vocab), ("tgt", tgt_tok, config.tgt_vocab)):
        if tok.vocab_size != size:
            raise UsageError(f"{path}/{name}_tokenizer.json has {tok.vocab_size} tokens but "
                             f"config.json says {name}_vocab={size}")
    model = EncoderDecoder(config)
    _check_weights(path / WEIGHTS, model)
    load_model(model, str(path / WEIGHTS), strict=True)
    model.to(map_location).eval()
    try:
        meta = json.loads(_existing(path / META).read_text())
    except json.JSONDecodeError as err:
        raise UsageError(f"{path / META}: not valid JSON ({err})") from None
    return Checkpoint(model, config, src_tok, tgt_tok, int(meta.get("step", 0)), path, meta)


def _check_weights(file: Path, model: EncoderDecoder) -> None:
    """Every stored tensor must exist in a model of this config, with the same shape."""
    try:
        with safe_open(str(file), framework="pt") as f:
            shapes = {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}
            for k in shapes:  # reads every tensor: catches files cut short
                f.get_tensor(k)
    except FileNotFoundError:
        raise
    except Exception as err:
        raise UsageError(f"{file}: truncated or not a safetensors file ({err})") from None
    expected = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    for k, shape in shapes.items():
        if k not in expected:
            raise UsageError(f"{file}: tensor {k!r} does not belong to the model in config.json")
        if shape != expected[k]:
            raise UsageError(f"{file}: tensor {k!r} has shape {shape}, but config.json "
                             f"gives a model expecting {expected[k]} (checkpoint from "
                             f"another config?)")


def _existing(file: Path) -> Path:
    if not file.exists():
        raise UsageError(f"{file} is missing from the checkpoint")
    return file


def _sibling(path: Path, suffix: str) -> Path:
    return path.with_name(path.name + suffix)


def _resolve(path: Path) -> Path | None:
    """The complete checkpoint directory: ``path`` itself, else ``path.old`` after a crash."""
    for candidate in (path, _sibling(path, ".old")):
        if (candidate / WEIGHTS).exists():
            return candidate
    return None
