"""``lm export --to gguf``: a decoder-only LM as ``DIR/model.gguf`` in the llama.cpp
architecture its block is (``interop.lm.architectures``: ``llama``, ``qwen2``, ``qwen3``, ``gpt2``),
ending where the checkpoint's generation settings end it."""

from __future__ import annotations

from pathlib import Path

from decoderkit.generation.lm.defaults import NO_DEFAULTS, GenerationDefaults
from decoderkit.interop.gguf.gpt2 import gpt2_architecture
from decoderkit.interop.gguf.llama import llama_architecture
from decoderkit.interop.gguf.writer import bpe_vocabulary, write_gguf
from decoderkit.interop.lm.architectures import GPT2, LLAMA, architecture_of
from decoderkit.nn.lm.model import DecoderOnlyLM
from decoderkit.text.lm.tokenizer import LMTokenizer

# a block of interop.lm.architectures -> its GGUF writer
WRITERS = {LLAMA: llama_architecture, GPT2: gpt2_architecture}


def export_gguf(model: DecoderOnlyLM, tokenizer: LMTokenizer, out: str | Path,
                kind: str = "float32", overwrite: bool = False,
                chat_template: str | None = None,
                generation: GenerationDefaults = NO_DEFAULTS) -> Path:
    """Write ``out``/model.gguf for llama.cpp (``kind``: float32, float16 or q8_0; the
    tokenizer and ``chat_template`` inside, llama.cpp stopping at every end id of the tokenizer
    and of ``generation``) and the manifest, atomically (``overwrite``: only an earlier
    export)."""
    if not isinstance(model, DecoderOnlyLM):
        raise TypeError(f"model must be a DecoderOnlyLM, got {type(model).__name__}")
    row = architecture_of(model.config)  # the one detection: its writer and its name
    arch = WRITERS[row.block](model, row)
    vocabulary = bpe_vocabulary(tokenizer, model.config.vocab_size, generation.eos_ids)
    manifest = {"config": model.config.to_dict(), "architecture": arch.name}
    return write_gguf(out, overwrite, arch, vocabulary, kind, manifest, chat_template)
