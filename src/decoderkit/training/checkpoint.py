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

``meta.json`` also records the sha256 of every other file (``"sha256"``); ``load_checkpoint``
verifies them (``trainer_state`` verifies trainer.pt), so damaged bytes are an error naming
the file, never a model that loads and translates to garbage. Checkpoints written before
checksums existed (0.1) load unverified.

A save writes a complete checkpoint into a new hidden directory beside ``DIR``
(``.DIR.decoderkit-<random>``) and swaps it in with two renames, so a crash never leaves a
half-written checkpoint: if it strikes between the renames, the previous complete checkpoint
is in ``.DIR.decoderkit-<random>-previous/checkpoint`` and is found and used. A save never
replaces a directory holding anything but checkpoint files, nor a regular file.
"""

from __future__ import annotations

import glob
import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import load_model, save_model

from decoderkit.base.errors import UsageError
from decoderkit.base.files import TEMP_PREFIX, file_sha256, swap_in_directory, temp_sibling
from decoderkit.nn.model import EncoderDecoder, ModelConfig
from decoderkit.training.tokenizer import Tokenizer

WEIGHTS, CONFIG, META, TRAINER = "model.safetensors", "config.json", "meta.json", "trainer.pt"
SRC_TOKENIZER, TGT_TOKENIZER = "src_tokenizer.json", "tgt_tokenizer.json"
FILES = (WEIGHTS, CONFIG, SRC_TOKENIZER, TGT_TOKENIZER, META, TRAINER)  # what the format owns
PREVIOUS = "-previous"  # suffix of the hidden directory holding the replaced checkpoint
CONTENT = "checkpoint"  # the replaced checkpoint's name inside that holder


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
        _verify(self.path, self.meta, [TRAINER])
        try:
            return torch.load(file, map_location="cpu", weights_only=True)
        except Exception as err:  # truncated or foreign pickle
            raise UsageError(f"{file}: unreadable trainer state ({err})") from None


def save_checkpoint(directory: str | Path, model: EncoderDecoder, src_tokenizer: Tokenizer,
                    tgt_tokenizer: Tokenizer, *, step: int, meta: dict | None = None,
                    trainer_state: dict | None = None) -> Path:
    """Write a complete checkpoint to ``directory`` (replacing the previous one atomically).

    Refuses (``UsageError``) if ``directory`` is a file or holds files of other kinds.
    """
    final = Path(directory)
    check_replaceable(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_sibling(final, suffix="")
    tmp.mkdir()
    try:
        save_model(model, str(tmp / WEIGHTS))
        model.config.save(tmp / CONFIG)
        src_tokenizer.save(tmp / SRC_TOKENIZER)
        tgt_tokenizer.save(tmp / TGT_TOKENIZER)
        if trainer_state is not None:
            torch.save(trainer_state, tmp / TRAINER)
        sums = {p.name: file_sha256(p) for p in sorted(tmp.iterdir())}
        (tmp / META).write_text(json.dumps({"step": step, **(meta or {}), "sha256": sums},
                                           indent=2))
        swap_in_directory(tmp, final, PREVIOUS, CONTENT)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)  # ours, made above (gone once swapped in)
        raise
    return final


def check_replaceable(directory: str | Path) -> None:
    """A save may replace ``directory`` only if it is absent, empty or holds checkpoint files
    alone; otherwise ``UsageError`` naming what is there."""
    path = Path(directory)
    if path.exists() and not path.is_dir():
        raise UsageError(f"{path} is a file, not a checkpoint directory")
    if path.is_dir():
        foreign = sorted(p.name for p in path.iterdir() if p.name not in FILES)
        if foreign:
            shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more"
                                              if len(foreign) > 5 else "")
            raise UsageError(f"{path} holds files that are not part of a decoderkit checkpoint "
                             f"({shown}); refusing to replace them: move them or choose "
                             "another directory")


def has_checkpoint(directory: str | Path) -> bool:
    """True if ``directory`` (or the previous one left by a crash mid-swap) holds a checkpoint."""
    return _resolve(Path(directory)) is not None


def load_checkpoint(directory: str | Path, map_location: str | torch.device = "cpu",
                    ) -> Checkpoint:
    """Load the checkpoint in ``directory``; bad or mismatched files raise one clear error."""
    path = _resolve(Path(directory))
    if path is None:
        raise UsageError(f"no checkpoint in {directory} (expected {directory}/{WEIGHTS})")
    meta = read_meta(path)
    _verify(path, meta, [f for f in FILES if f not in (META, TRAINER)])
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
    return Checkpoint(model, config, src_tok, tgt_tok, meta["step"], path, meta)


def read_meta(path: Path) -> dict:
    """``meta.json`` of the checkpoint in ``path``: a JSON object with an int ``step`` (and, since
    0.2, a ``sha256`` object of file name -> hex digest); anything else is a ``UsageError``."""
    file = _existing(path / META)
    try:
        meta = json.loads(file.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise UsageError(f"{file}: not valid JSON ({err})") from None
    if not isinstance(meta, dict):
        raise UsageError(f"{file}: expected a JSON object, got {type(meta).__name__}")
    meta.setdefault("step", 0)
    if not isinstance(meta["step"], int) or isinstance(meta["step"], bool) or meta["step"] < 0:
        raise UsageError(f"{file}: 'step' must be an int >= 0, got {meta['step']!r}")
    sums = meta.get("sha256", {})
    if not isinstance(sums, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                             for k, v in sums.items()):
        raise UsageError(f"{file}: 'sha256' must map file names to hex digests")
    return meta


def _verify(path: Path, meta: dict, names: list[str]) -> None:
    """Each of ``names`` whose checksum ``meta`` records must still have it."""
    sums = meta.get("sha256", {})
    for name in names:
        if name in sums and file_sha256(_existing(path / name)) != sums[name]:
            raise UsageError(f"{path / name}: checksum mismatch (the file was damaged or "
                             "changed after the checkpoint was saved)")


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


def _resolve(path: Path) -> Path | None:
    """The complete checkpoint directory: ``path`` itself, else the previous checkpoint that a
    crash between the two renames of a save left in its hidden holder (the newest one)."""
    if (path / WEIGHTS).exists():
        return path
    pattern = f".{glob.escape(path.name)}{TEMP_PREFIX}*{PREVIOUS}/{CONTENT}/{WEIGHTS}"
    found = sorted(path.parent.glob(pattern), key=lambda p: p.stat().st_mtime)
    return found[-1].parent if found else None
