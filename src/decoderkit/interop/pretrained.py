"""The one place a decoder-only LM is opened from a path, whatever wrote it: an ``lm train``
run directory (``training.lm.checkpoint``), a Hugging Face gpt2 / openai-gpt directory
(``interop.hf_gpt``), a nanoGPT ``ckpt.pt`` or the directory holding it (``interop.nanogpt``).
Every ``--checkpoint`` of the ``decoderkit lm`` commands loads here.
"""

from __future__ import annotations

from pathlib import Path

from decoderkit.base.errors import UsageError
from decoderkit.interop.hf_gpt import is_hf_gpt_directory, load_hf_gpt, read_hf_config
from decoderkit.interop.nanogpt import is_nanogpt_checkpoint, load_nanogpt
from decoderkit.nn.lm import DecoderOnlyLM, LMConfig
from decoderkit.training.checkpoint_dir import read_config
from decoderkit.training.lm.checkpoint import CONFIG, is_lm_checkpoint, load_lm_checkpoint
from decoderkit.training.lm.tokenizer import LMTokenizer


def load_pretrained(path: str | Path) -> tuple[DecoderOnlyLM, LMTokenizer | None]:
    """(model in eval mode, its tokenizer or None) of the LM at ``path``."""
    path = Path(path)
    if is_lm_checkpoint(path):  # (also one a crash left mid-save: its holder is read)
        model, tokenizer, _ = load_lm_checkpoint(path)
        return model, tokenizer
    if not path.exists():
        raise UsageError(f"{path}: no such file or directory")
    if path.is_dir() and is_hf_gpt_directory(path):
        return load_hf_gpt(path)
    if is_nanogpt_checkpoint(path):
        return load_nanogpt(path)
    raise UsageError(f"{path} is not a decoder-only LM this version reads: an lm train "
                     f"directory (meta.json, tokenizer.json), a Hugging Face directory whose "
                     f"config.json says model_type gpt2 or openai-gpt, or a nanoGPT ckpt.pt "
                     f"(or its directory)")


def pretrained_config(path: str | Path) -> LMConfig | None:
    """The ``LMConfig`` of the decoder-only LM at ``path`` (what ``load_pretrained`` reads;
    a nanoGPT checkpoint is read whole), or None if ``path`` is not one."""
    path = Path(path)
    if is_lm_checkpoint(path) and (path / CONFIG).is_file():
        return read_config(path / CONFIG, LMConfig)
    if path.is_dir() and is_hf_gpt_directory(path):
        return read_hf_config(path)[0]
    if is_nanogpt_checkpoint(path):
        return load_nanogpt(path)[0].config
    return None
