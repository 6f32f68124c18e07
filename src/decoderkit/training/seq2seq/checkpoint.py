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

``meta.json`` also records the sha256 of every other file; saving and loading are
``training.checkpoint_dir``'s verified, atomic directory (a crash never leaves a half-written
checkpoint; damaged bytes are an error naming the file), shared with the LM's checkpoints.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors.torch import save_model

from decoderkit.base.errors import UsageError
from decoderkit.nn.seq2seq.model import EncoderDecoder, ModelConfig
from decoderkit.training import checkpoint_dir
from decoderkit.training.checkpoint_dir import (  # noqa: F401 (has_checkpoint: public here)
    META,
    TRAINER,
    WEIGHTS,
    existing,
    load_weights,
    has_checkpoint,
    open_directory,
    read_config,
    read_trainer_state,
)
from decoderkit.text.seq2seq.tokenizer import Tokenizer

CONFIG = "config.json"
SRC_TOKENIZER, TGT_TOKENIZER = "src_tokenizer.json", "tgt_tokenizer.json"
FILES = (WEIGHTS, CONFIG, SRC_TOKENIZER, TGT_TOKENIZER, META, TRAINER)  # what the format owns


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
        return read_trainer_state(self.path, self.meta)


def save_checkpoint(directory: str | Path, model: EncoderDecoder, src_tokenizer: Tokenizer,
                    tgt_tokenizer: Tokenizer, *, step: int, meta: dict | None = None,
                    trainer_state: dict | None = None) -> Path:
    """Write a complete checkpoint to ``directory`` (replacing the previous one atomically).

    Refuses (``UsageError``) if ``directory`` is a file or holds files of other kinds.
    """
    def write(tmp: Path) -> None:
        save_model(model, str(tmp / WEIGHTS))
        model.config.save(tmp / CONFIG)
        src_tokenizer.save(tmp / SRC_TOKENIZER)
        tgt_tokenizer.save(tmp / TGT_TOKENIZER)

    return checkpoint_dir.write_directory(directory, FILES, write, step=step, meta=meta,
                                          trainer_state=trainer_state)


def load_checkpoint(directory: str | Path, map_location: str | torch.device = "cpu",
                    ) -> Checkpoint:
    """Load the checkpoint in ``directory``; bad or mismatched files raise one clear error."""
    path, meta = open_directory(directory, FILES)
    config = read_config(path / CONFIG, ModelConfig)
    src_tok = Tokenizer.load(existing(path / SRC_TOKENIZER))
    tgt_tok = Tokenizer.load(existing(path / TGT_TOKENIZER))
    for name, tok, size in (("src", src_tok, config.src_vocab), ("tgt", tgt_tok, config.tgt_vocab)):
        if tok.vocab_size != size:
            raise UsageError(f"{path}/{name}_tokenizer.json has {tok.vocab_size} tokens but "
                             f"config.json says {name}_vocab={size}")
    model = load_weights(path, config, EncoderDecoder).to(map_location).eval()
    return Checkpoint(model, config, src_tok, tgt_tok, meta["step"], path, meta)
