"""An opened decoder-only model: what generation, the server, chat and the exporters take,
whichever directory it came from (an ``lm train`` run, Hugging Face, nanoGPT): the model in
eval mode, its tokenizer, the directory's generation defaults and its chat template (read
by the format once, at the first use of ``chat``: a broken template refuses only the commands
that chat, as transformers' ``apply_chat_template``). Below ``training`` so that
serving a model needs no training module (``training.lm.checkpoint`` writes and reads the run
directory and resumes from it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from decoderkit.generation.lm.choose import usable_vocab
from decoderkit.generation.lm.defaults import NO_DEFAULTS, GenerationDefaults
from decoderkit.nn.lm.model import DecoderOnlyLM, LMConfig
from decoderkit.text.lm.chat import ChatTemplate, no_template
from decoderkit.text.lm.tokenizer import LMTokenizer


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
    chat_reader: Callable[[], ChatTemplate | None] | None = None  # how the format reads its
    # chat template (a GGUF file's metadata); None: the directory's (``ChatTemplate.find``)
    chat_missing: str | None = None  # why it has none, where chat_reader says; None: the
    # directory's words (``no_template``)

    @cached_property
    def chat(self) -> ChatTemplate | None:
        """The model's chat template, None where it has none: what lm chat, the server's
        Chat Completions, lm tune's chat examples and the exporters take."""
        return ChatTemplate.find(self.path) if self.chat_reader is None else self.chat_reader()

    @property
    def no_chat(self) -> str:
        """Why ``chat`` is None, naming where a template would be."""
        return no_template(self.path) if self.chat_missing is None else self.chat_missing

    @property
    def config(self) -> LMConfig:
        """The model's config (as a translation ``Checkpoint``'s ``.config``)."""
        return self.model.config

    @property
    def end_ids(self) -> frozenset[int]:
        """The ids generation stops at: the tokenizer's end of text and the directory's."""
        return self.generation.end_ids(self.tokenizer)

    @property
    def vocab(self) -> int:
        """The ids generation may choose: the model's rows, none past its tokenizer's
        (``generation.lm.choose.usable_vocab``)."""
        return usable_vocab(self.config.vocab_size,
                            None if self.tokenizer is None else self.tokenizer.vocab_size)
