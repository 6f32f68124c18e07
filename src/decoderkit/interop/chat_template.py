"""The chat template of a language model path, wherever the format keeps it: a GGUF file's
``tokenizer.chat_template`` (``interop.gguf.open.gguf_chat``), else the directory's
(``ChatTemplate.find``: chat_template.jinja, tokenizer_config.json); a LoRA adapter's is its
base's. For every command that chats (lm chat, serve's Chat Completions, lm export's carried
template) and lm tune."""

from __future__ import annotations

from pathlib import Path

from decoderkit.interop.checkpoints import GGUF, detected
from decoderkit.interop.gguf.ollama import NO_GO_TEMPLATE
from decoderkit.interop.gguf.open import gguf_chat
from decoderkit.interop.lm.peft import adapter_base, is_adapter
from decoderkit.text.lm.chat import ChatTemplate, no_template


def chat_template(path: str | Path) -> ChatTemplate | None:
    """The chat template of the LM at ``path`` (a LoRA adapter's: its base's), None where it
    has none."""
    path = adapter_base(path) if is_adapter(path) else path
    return gguf_chat(path) if detected(path) is GGUF else ChatTemplate.find(path)


def no_chat_template(path: str | Path) -> str:
    """Why the LM at ``path`` has no chat template, naming where one would be."""
    path = adapter_base(path) if is_adapter(path) else path
    if detected(path) is not GGUF:
        return no_template(path)
    ollama = f" ({NO_GO_TEMPLATE})" if not Path(path).exists() else ""
    return f"this model has no chat template: {path} has no tokenizer.chat_template{ollama}"
