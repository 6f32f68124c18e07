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

from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors.torch import save_model

from decoderkit.base.errors import UsageError
from decoderkit.generation.lm.choose import usable_vocab
from decoderkit.generation.lm.defaults import NO_DEFAULTS, GenerationDefaults
from decoderkit.nn.lm import DecoderOnlyLM, LMConfig
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
from decoderkit.training.lm.tokenizer import LMTokenizer

CONFIG, TOKENIZER = "config.json", "tokenizer.json"
FILES = (WEIGHTS, CONFIG, TOKENIZER, META, TRAINER)  # what the format owns


@dataclass
class LMCheckpoint:
    """A loaded LM run directory; ``model`` is in eval mode on the requested device."""

    model: DecoderOnlyLM
    tokenizer: LMTokenizer | None  # None: a foreign model without one (nanoGPT sans meta.pkl)
    step: int
    path: Path  # the directory read (a crash mid-save: the previous one, in its holder)
    meta: dict = field(default_factory=dict)
    generation: GenerationDefaults = NO_DEFAULTS  # a directory's (HF's
    # generation_config.json): its end-of-sequence ids and sampling defaults; ours: none

    @property
    def config(self) -> LMConfig:
        """The model's config (as a translation ``Checkpoint``'s ``.config``)."""
        return self.model.config

    @property
    def end_ids(self) -> frozenset[int]:
        """The ids generation stops at: the tokenizer's end of text and the directory's."""
        return self.generation.end_ids(() if self.tokenizer is None else self.tokenizer.end_ids)

    @property
    def vocab(self) -> int:
        """The ids generation may choose: the model's rows, none past its tokenizer's
        (``generation.lm.choose.usable_vocab``)."""
        return usable_vocab(self.config.vocab_size,
                            None if self.tokenizer is None else self.tokenizer.vocab_size)

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
                       ) -> LMCheckpoint:
    """Load the run directory ``directory``; bad or mismatched files raise one clear error."""
    path, meta = open_directory(directory, FILES)
    config = read_config(path / CONFIG, LMConfig)
    tokenizer = LMTokenizer.load(existing(path / TOKENIZER))
    if tokenizer.vocab_size > config.vocab_size:
        raise UsageError(f"{path / TOKENIZER} has {tokenizer.vocab_size} tokens but "
                         f"config.json says vocab_size={config.vocab_size}")
    model = load_weights(path, config, DecoderOnlyLM).to(map_location).eval()
    return LMCheckpoint(model, tokenizer, meta["step"], path, meta)

