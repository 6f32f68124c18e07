"""A GGUF file opened as an ``LMCheckpoint``, for the one opener (``interop.checkpoints``):
the path resolved (``interop.gguf.detect``: a file, a directory holding one, an Ollama name),
the header read and checked whole (``interop.gguf.reader``) before anything else, then the
config (``interop.gguf.model``), the tokenizer (``interop.gguf.vocab``: its size bounds the
config's vocabulary where no key gives it) and the weights through the weights pipeline, a
block of rows at a time into the unfilled model. The end-of-text ids of the file's eos / eot /
eom keys are the checkpoint's generation defaults; its chat template is
``tokenizer.chat_template``, carried by the checkpoint (an Ollama model's Go template is not
one: ``interop.gguf.ollama``). A LoRA adapter's GGUF (``general.type`` "adapter": what
``interop.gguf.lora`` writes), given as the file or a directory holding it, is refused in one
line saying so."""

from __future__ import annotations

from pathlib import Path

import torch

from decoderkit.base.errors import UsageError
from decoderkit.generation.lm.defaults import GenerationDefaults
from decoderkit.interop.gguf import vocab
from decoderkit.interop.gguf.detect import gguf_path
from decoderkit.interop.gguf.ollama import NO_GO_TEMPLATE
from decoderkit.interop.gguf.model import gguf_config, gguf_names, reordered
from decoderkit.interop.gguf.reader import Header, read_header
from decoderkit.interop.gguf.tensors import GGUFTensors
from decoderkit.interop.gpt.hf import build_lm
from decoderkit.nn.lm.model import LMConfig
from decoderkit.generation.lm.checkpoint import LMCheckpoint

ORIGIN = "gguf"  # meta["origin"] of an opened GGUF file
WHAT = "the GGUF file's metadata"  # where the model's shapes come from, in refusals
TYPE, ADAPTER = "general.type", "adapter"  # the key and value of a LoRA adapter's file


def _header(path: str | Path) -> Header:
    """The checked header of the model GGUF at ``path``; a LoRA adapter's is refused."""
    header = read_header(gguf_path(path))
    if header.fields.get(TYPE) == ADAPTER:
        where = f"{path} holds {header.file.name}, which is" if Path(path) != header.file \
            else f"{path} is"
        raise UsageError(f"{where} a LoRA adapter ({TYPE} is {ADAPTER!r}: llama.cpp's LoRA "
                         "GGUF, applied to its base model by llama.cpp's --lora), not a model")
    return header


def _vocab_rows(header: Header) -> int | None:
    tokens = header.fields.get(vocab.KEY + "tokens")
    return len(tokens) if isinstance(tokens, list) else None


def read_gguf_config(path: str | Path) -> LMConfig:
    """The config of the GGUF model at ``path``, its weights unread."""
    header = _header(path)
    return gguf_config(header, _vocab_rows(header))


def load_gguf(path: str | Path, map_location: str | torch.device = "cpu") -> LMCheckpoint:
    """The GGUF model at ``path`` in eval mode on ``map_location`` (float32, dequantized), its
    tokenizer (None where the file has none), its end-of-text ids and chat template."""
    header = _header(path)
    config = gguf_config(header, _vocab_rows(header))
    tokenizer = vocab.gguf_tokenizer(header, config.vocab_size)
    tensors = GGUFTensors(header, reordered(header, config))
    model = build_lm(config, gguf_names(header, config), header.file, WHAT, tensors)
    ends = tuple(i for i in vocab.end_ids(header) if i < config.vocab_size)
    return LMCheckpoint(model.to(map_location), tokenizer, 0, header.file,
                        {"step": 0, "origin": ORIGIN},
                        GenerationDefaults(header.file.name, ends),
                        vocab.gguf_chat_template(header, tokenizer), _no_chat(path))


def _no_chat(path: str | Path) -> str:
    """Why the GGUF model at ``path`` has no chat template (an Ollama name: its Go one)."""
    ollama = f" ({NO_GO_TEMPLATE})" if not Path(path).exists() else ""
    return f"this model has no chat template: {path} has no tokenizer.chat_template{ollama}"

