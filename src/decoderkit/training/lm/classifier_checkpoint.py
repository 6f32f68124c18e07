"""A fine-tuned classifier's run directory (``lm finetune``): an LM run directory plus the head.

Layout of ``DIR``::

    model.safetensors    weights: ``lm.*`` (the grown LM) and ``head.weight``
    config.json          the grown LM's LMConfig (vocabulary V + 3)
    classifier.json      the ClassifierConfig (labels, start/delimiter/extract ids, dropout)
    tokenizer.json       the pretrained model's LMTokenizer (the new tokens are ids, not text)
    meta.json            step, training settings, validation history, checksums
    trainer.pt           optimiser, scheduler and RNG state (resume only)

Written and read through ``training.checkpoint_dir`` (verified, atomic, never over another
directory's files), as the LM's own run directory is.
"""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import save_model

from decoderkit.base.errors import UsageError
from decoderkit.nn.lm.classifier import ClassifierConfig, GPTClassifier
from decoderkit.nn.lm.model import DecoderOnlyLM, LMConfig
from decoderkit.training import checkpoint_dir as cd
from decoderkit.training.lm.checkpoint import CONFIG, TOKENIZER, LMRun
from decoderkit.text.lm.tokenizer import LMTokenizer

CLASSIFIER = "classifier.json"
FILES = (cd.WEIGHTS, CONFIG, CLASSIFIER, TOKENIZER, cd.META, cd.TRAINER)  # the format's files


class ClassifierCheckpoint(LMRun):
    """A loaded classifier run directory: ``model`` is a ``GPTClassifier`` in eval mode."""


def save_classifier_checkpoint(directory: str | Path, model: GPTClassifier,
                               tokenizer: LMTokenizer, *, step: int, meta: dict | None = None,
                               trainer_state: dict | None = None) -> Path:
    """Write a complete classifier run directory to ``directory`` (atomically replacing the
    previous one; a file, or a directory holding other files, is refused)."""
    def write(tmp: Path) -> None:
        save_model(model, str(tmp / cd.WEIGHTS))
        model.lm.config.save(tmp / CONFIG)
        model.config.save(tmp / CLASSIFIER)
        tokenizer.save(tmp / TOKENIZER)

    return cd.write_directory(directory, FILES, write, step=step, meta=meta,
                              trainer_state=trainer_state)


def is_classifier_checkpoint(directory: str | Path) -> bool:
    """True if ``directory`` looks like a classifier run directory (meta and classifier.json)."""
    path = cd.resolve(Path(directory))
    return path is not None and (path / cd.META).is_file() and (path / CLASSIFIER).is_file()


def open_classifier_checkpoint(directory: str | Path,
                               map_location: str | torch.device = "cpu") -> ClassifierCheckpoint:
    """Load the classifier run directory ``directory``; bad or mismatched files are one
    ``UsageError`` naming the file."""
    if not is_classifier_checkpoint(directory):
        raise UsageError(f"{directory} is not a fine-tuned classifier (lm finetune's directory: "
                         f"{CLASSIFIER}, meta.json, ...)")
    path, meta = cd.open_directory(directory, FILES)
    config = cd.read_config(path / CONFIG, LMConfig)
    head = cd.read_config(path / CLASSIFIER, ClassifierConfig)
    tokenizer = LMTokenizer.load(cd.existing(path / TOKENIZER))
    if tokenizer.vocab_size > config.vocab_size:
        raise UsageError(f"{path / TOKENIZER} has {tokenizer.vocab_size} tokens but "
                         f"config.json says vocab_size={config.vocab_size}")
    def make(lm_config: LMConfig) -> GPTClassifier:
        try:
            return GPTClassifier(DecoderOnlyLM(lm_config), head)
        except UsageError as err:
            raise UsageError(f"{path / CLASSIFIER}: {err}") from None

    model = cd.load_weights(path, config, make).to(map_location).eval()
    return ClassifierCheckpoint(model, tokenizer, meta["step"], path, meta)
