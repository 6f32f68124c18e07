"""A language model's run directory: everything needed to sample from, evaluate or resume it.

Layout of ``DIR``::

    model.safetensors    weights (a tied head stored once)
    config.json          the LMConfig
    tokenizer.json       the LMTokenizer (HF tokenizers file)
    meta.json            step, training settings, validation history, checksums
    trainer.pt           optimiser, scheduler, RNG and early-stop state (resume only)

Written and read through ``training.checkpoint_dir`` (the encoder-decoder checkpoints' own
verified, atomic directory), so the same guarantees hold: never half-written, damaged bytes
named, a directory of other files never replaced.
"""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import save_model

from decoderkit.base.errors import UsageError
from decoderkit.generation.lm.checkpoint import LMCheckpoint
from decoderkit.nn.lm.model import DecoderOnlyLM, LMConfig
from decoderkit.training import checkpoint_dir
from decoderkit.training.checkpoint_dir import (
    META,
    TRAINER,
    WEIGHTS,
    existing,
    load_weights,
    open_directory,
    read_config,
    read_trainer_state,
    resolve,
)
from decoderkit.text.lm.tokenizer import LMTokenizer

CONFIG, TOKENIZER = "config.json", "tokenizer.json"
FILES = (WEIGHTS, CONFIG, TOKENIZER, META, TRAINER)  # what the format owns


class LMRun(LMCheckpoint):
    """An LM run directory as loaded to resume it: the ``LMCheckpoint`` and what the trainer
    saved beside it."""

    def trainer_state(self) -> dict | None:
        """Optimiser/scheduler/RNG state saved for resuming (verified), or None."""
        return read_trainer_state(self.path, self.meta)


def save_lm_checkpoint(directory: str | Path, model: DecoderOnlyLM, tokenizer: LMTokenizer, *,
                       step: int, meta: dict | None = None,
                       trainer_state: dict | None = None) -> Path:
    """Write a complete run directory to ``directory`` (replacing the previous one atomically);
    a file, or a directory holding other files, is refused."""
    def write(tmp: Path) -> None:
        save_model(model, str(tmp / WEIGHTS))
        model.config.save(tmp / CONFIG)
        tokenizer.save(tmp / TOKENIZER)

    return checkpoint_dir.write_directory(directory, FILES, write, step=step, meta=meta,
                                          trainer_state=trainer_state)


def is_lm_checkpoint(directory: str | Path) -> bool:
    """True if ``directory`` looks like an LM run directory (weights, meta and tokenizer.json;
    a Hugging Face directory has no meta.json)."""
    path = resolve(Path(directory))
    return path is not None and (path / META).is_file() and (path / TOKENIZER).is_file()


def load_lm_checkpoint(directory: str | Path, map_location: str | torch.device = "cpu",
                       ) -> LMRun:
    """Load the run directory ``directory``; bad or mismatched files raise one clear error."""
    path, meta = open_directory(directory, FILES)
    config = read_config(path / CONFIG, LMConfig)
    tokenizer = LMTokenizer.load(existing(path / TOKENIZER))
    if tokenizer.vocab_size > config.vocab_size:
        raise UsageError(f"{path / TOKENIZER} has {tokenizer.vocab_size} tokens but "
                         f"config.json says vocab_size={config.vocab_size}")
    model = load_weights(path, config, DecoderOnlyLM).to(map_location).eval()
    return LMRun(model, tokenizer, meta["step"], path, meta)

