"""The one place a ``--checkpoint DIR`` is opened: a decoderkit checkpoint, or a model directory
of another format that decoderkit reads as one (a Hugging Face Marian directory, through
``interop.marian``; Marian's own ``model.npz``, or a directory holding one, through
``interop.marian_npz``). Every command that takes ``--checkpoint`` loads through here.
"""

from __future__ import annotations

from pathlib import Path

import torch

from decoderkit.base.errors import UsageError
from decoderkit.interop import marian_npz
from decoderkit.interop.hf_gpt import is_hf_gpt_directory
from decoderkit.interop.huggingface import model_type
from decoderkit.interop.marian import ORIGIN, is_marian_directory, load_marian, read_config
from decoderkit.nn.encoder_decoder import ModelConfig
from decoderkit.training import checkpoint_dir
from decoderkit.training.seq2seq import checkpoint
from decoderkit.training.rundir import claimed
from decoderkit.training.seq2seq.checkpoint import FILES, Checkpoint, save_checkpoint


def load_checkpoint(directory: str | Path, map_location: str | torch.device = "cpu",
                    ) -> Checkpoint:
    """The checkpoint in ``directory``, whatever its format (see the module docstring)."""
    if is_marian_directory(directory):
        return load_marian(directory, map_location)
    if marian_npz.is_marian_npz(directory):
        return marian_npz.load_marian_npz(directory, map_location)
    refuse_other_models(directory)
    return checkpoint.load_checkpoint(directory, map_location)


def checkpoint_config(directory: str | Path) -> ModelConfig:
    """The ``ModelConfig`` of the checkpoint in ``directory``, without loading its weights."""
    if is_marian_directory(directory):
        return read_config(directory)[0]
    if marian_npz.is_marian_npz(directory):
        return marian_npz.read_config(directory)
    refuse_other_models(directory)
    file = Path(directory) / checkpoint.CONFIG
    if not file.is_file():
        raise UsageError(f"--checkpoint {directory}: no {checkpoint.CONFIG} there "
                         "(not a checkpoint directory)")
    return checkpoint_dir.read_config(file, ModelConfig)


def refuse_other_models(directory: str | Path) -> None:
    """A Hugging Face directory of another ``model_type`` is refused saying which it is and
    what is read (rather than as a decoderkit checkpoint missing its files)."""
    kind = model_type(directory)
    if kind is None:
        return
    lm = (" (a decoder-only LM: the lm commands read it, e.g. decoderkit lm sample "
          f"--checkpoint {directory})") if is_hf_gpt_directory(directory) else ""
    raise UsageError(f"--checkpoint {directory}: a Hugging Face directory of model_type "
                     f"{kind!r}{lm}; translation reads decoderkit checkpoints and Hugging Face "
                     f"model_type {ORIGIN!r} directories (opus-mt)")


def convert_checkpoint(path: str | Path, out: str | Path, overwrite: bool = False) -> Path:
    """Write the model at ``path`` (a format ``load_checkpoint`` opens) as a decoderkit
    checkpoint ``out`` (step 0, no training data recorded: ``train --resume --out OUT --data
    TSV`` fine-tunes it). ``out`` follows a training run's rules: new or empty, or with
    ``overwrite`` a checkpoint; held under its lock."""
    ckpt = load_checkpoint(path)
    with claimed(out, resume=False, overwrite=overwrite, files=FILES) as real:
        return save_checkpoint(real, ckpt.model, ckpt.src_tokenizer, ckpt.tgt_tokenizer,
                               step=0, meta={k: v for k, v in ckpt.meta.items() if k != "step"})
