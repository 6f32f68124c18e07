"""The one place a ``--checkpoint DIR`` is opened: a decoderkit checkpoint, or a model directory
of another format that decoderkit reads as one (a Hugging Face Marian directory, through
``interop.marian``). Every command that takes ``--checkpoint`` loads through here.
"""

from __future__ import annotations

from pathlib import Path

import torch

from decoderkit.base.errors import UsageError
from decoderkit.interop.marian import is_marian_directory, load_marian, read_config
from decoderkit.nn.encoder_decoder import ModelConfig
from decoderkit.training import checkpoint_dir
from decoderkit.training.seq2seq import checkpoint
from decoderkit.training.seq2seq.checkpoint import Checkpoint


def load_checkpoint(directory: str | Path, map_location: str | torch.device = "cpu",
                    ) -> Checkpoint:
    """The checkpoint in ``directory``, whatever its format (see the module docstring)."""
    if is_marian_directory(directory):
        return load_marian(directory, map_location)
    return checkpoint.load_checkpoint(directory, map_location)


def checkpoint_config(directory: str | Path) -> ModelConfig:
    """The ``ModelConfig`` of the checkpoint in ``directory``, without loading its weights."""
    if is_marian_directory(directory):
        return read_config(directory)[0]
    file = Path(directory) / checkpoint.CONFIG
    if not file.is_file():
        raise UsageError(f"--checkpoint {directory}: no {checkpoint.CONFIG} there "
                         "(not a checkpoint directory)")
    return checkpoint_dir.read_config(file, ModelConfig)
