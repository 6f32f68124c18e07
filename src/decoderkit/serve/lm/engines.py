"""What an LM server runs: the engine's rows (``generation.lm.rows.Rows`` on the float32
rowwise copy or the int8 copy; ``interop.lm.ctranslate2.CT2Rows`` on a CTranslate2
Generator), its tokenizer, end-of-text ids, its chat template, the directory's generation
defaults (a request's sampling fields it leaves out: ``completions.sampling``), and the request
fields the engine cannot give (``generation.engines``' table: a 400 naming the field and the
engine).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch
from torch import nn

from decoderkit.generation.lm.defaults import (
    BUILTIN,
    MODE,
    NO_DEFAULTS,
    SAMPLING,
    GenerationDefaults,
)
from decoderkit.generation.lm.checkpoint import LMCheckpoint
from decoderkit.generation.lm.choose import usable_vocab
from decoderkit.generation.lm.prefix import (DEFAULT_PREFIX_CACHE_MB, PrefixStore,
                                             check_prefix_cache_mb)
from decoderkit.generation.lm.rows import Rows
from decoderkit.base.families import LM
from decoderkit.generation.engines import check_engine, unavailable
from decoderkit.generation.settings import settle
from decoderkit.interop.lm.ctranslate2 import ENGINE, CT2Rows, open_generator
from decoderkit.generation.lm.rowwise import for_inference
from decoderkit.nn.lm.model import LMConfig
from decoderkit.report.params import count_parameters
from decoderkit.base.errors import UsageError
from decoderkit.serve.fields import FieldError
from decoderkit.serve.lm.adapters import check_adapter_engine, put_adapters
from decoderkit.text.lm.chat import ChatTemplate
from decoderkit.text.lm.tokenizer import LMTokenizer

# what a request that sets none of them gets, but for a directory's own (its max_new_tokens
# aside: max_tokens is OpenAI's, 16)
REQUEST_DEFAULTS = {k: BUILTIN[k] for k in ("greedy", *SAMPLING)}


@dataclass(frozen=True)
class ServedLM:
    """A decoder-only LM ready to serve."""

    engine: str  # "decoderkit" (float32), "decoderkit int8" or "ctranslate2"
    name: str  # the model id clients send and /v1/models lists
    config: LMConfig
    tokenizer: LMTokenizer
    model: nn.Module | None  # the PyTorch copy the rows run (the explorer's too); None: CT2
    parameters: int  # of the float32 model the weights came from
    rows: Callable[[], object]  # a new Rows-like stepper (join, step, drop, running)
    unavailable: dict[str, str] = field(default_factory=dict)  # request field -> why not
    chat: ChatTemplate | None = None  # the model's chat template (None: no chat endpoint)
    no_chat: str = "this model has no chat template"  # why not, where chat is None
    generation: GenerationDefaults = NO_DEFAULTS  # the directory's end-of-sequence
    # ids and sampling defaults (HF's generation_config.json)
    adapters: dict[str, int] = field(default_factory=dict)  # LoRA adapter id -> its
    # parameters: served beside the base, a request's model picks one
    eos_ids: frozenset[int] = field(init=False)  # the end-of-text ids generation stops at:
    # the tokenizer's (none for a character vocabulary) and the directory's
    # (``GenerationDefaults.end_ids``), composed once here, not on each request's way down

    def __post_init__(self):
        object.__setattr__(self, "eos_ids", self.generation.end_ids(self.tokenizer))

    @property
    def vocab(self) -> int:
        """The ids a request may send and generation may choose: the model's rows, none past
        its tokenizer's (``generation.lm.choose.usable_vocab``)."""
        return usable_vocab(self.config.vocab_size, self.tokenizer.vocab_size)

    @property
    def notes(self) -> tuple[str, ...]:
        """The request defaults the directory gives ("temperature 0.6 (from
        generation_config.json)"), for the server's start-up line."""
        return settle([self.generation.as_source(REQUEST_DEFAULTS)], REQUEST_DEFAULTS,
                      MODE).notes

    def encode(self, text: str, field: str = "prompt", special: bool = True) -> list[int]:
        """A text prompt's ids (``special`` False: the text's alone, no BOS added); a text the
        tokenizer refuses (a character a character vocabulary lacks) is a ``FieldError``
        naming ``field``."""
        try:
            if not special:
                return self.tokenizer.encode(text)
            return self.tokenizer.encode_prompt(text)
        except UsageError as err:
            raise FieldError(field, str(err)) from None

    def check(self, body, asked: tuple[str, ...] = ()) -> None:
        """Refuse (``FieldError`` naming the field and the engine) a field this engine cannot
        give, when the request sets it (or a feature ``asked`` for by the route)."""
        check_engine(LM, self.engine, [*body.model_fields_set, *asked], FieldError)


def from_lm(model, tokenizer: LMTokenizer, name: str, int8: bool = False,
            compile: bool = False, autotune: bool = False,
            dtype: torch.dtype = torch.float32,
            adapters: dict[str, str | Path] | None = None,
            prefix_cache_mb: int | None = DEFAULT_PREFIX_CACHE_MB) -> ServedLM:
    """A loaded LM in PyTorch; the copy it runs is made once here (``for_inference``;
    ``compile``: its step compiled, at the worker's warm-up; ``dtype`` bfloat16: ``model``
    converted); ``adapters`` (id -> directory) put on it beside the base
    (``serve.lm.adapters``), each checked first. Its rows keep a ``PrefixStore`` of
    ``prefix_cache_mb`` MiB (None, or ``compile``: none)."""
    if prefix_cache_mb is not None:
        check_prefix_cache_mb(prefix_cache_mb)
    parameters = count_parameters(model)
    counts = put_adapters(model, name, adapters, int8, compile) if adapters else {}
    copy = for_inference(model, int8, compile, autotune, dtype)
    engine = "decoderkit" + (" bfloat16" if dtype == torch.bfloat16 else "") + \
        (" int8" if int8 else "")
    budget = None if compile or prefix_cache_mb is None else prefix_cache_mb << 20
    return ServedLM(engine, name, model.config, tokenizer, copy, parameters,
                    lambda: Rows(copy, None if budget is None else PrefixStore(budget)),
                    adapters=counts)


def from_ctranslate2(directory: str | Path, model, tokenizer: LMTokenizer, name: str,
                     threads: int = 0) -> ServedLM:
    """The LM ``model`` (its config, tokenizer and parameter count; its weights are not
    kept) served by CTranslate2 from its conversion in ``directory``."""
    config = model.config
    generator, vocabulary = open_generator(directory, config.vocab_size, threads)
    return ServedLM(ENGINE, name, config, tokenizer, None, count_parameters(model),
                    lambda: CT2Rows(generator, vocabulary, config.max_len),
                    unavailable(LM, ENGINE))


def from_checkpoint(ckpt: LMCheckpoint, path: str | Path, ctranslate2: str | Path | None = None,
                    threads: int = 0, int8: bool = False, compile: bool = False,
                    autotune: bool = False, dtype: torch.dtype = torch.float32,
                    adapters: dict[str, str | Path] | None = None,
                    prefix_cache_mb: int | None = DEFAULT_PREFIX_CACHE_MB) -> ServedLM:
    """The opened LM ``ckpt`` (read from ``path``) ready to serve: in PyTorch (``from_lm``),
    or in CTranslate2 from its conversion in ``ctranslate2``; its id is the checkpoint's name,
    its chat template and generation defaults the checkpoint's; ``adapters``: LoRA adapters
    beside the base, ``prefix_cache_mb`` the prefix store's MiB (``from_lm``)."""
    name = model_id(path)
    if adapters:
        check_adapter_engine(int8, compile, ctranslate2 is not None)
    served = (from_ctranslate2(ctranslate2, ckpt.model, ckpt.tokenizer, name, threads)
              if ctranslate2 is not None else
              from_lm(ckpt.model, ckpt.tokenizer, name, int8, compile, autotune, dtype,
                      adapters, prefix_cache_mb))
    return replace(served, chat=ckpt.chat, generation=ckpt.generation,
                   no_chat=f"{ckpt.no_chat} (POST /v1/completions takes plain text)")


def model_id(path: str | Path) -> str:
    """The model id of the checkpoint at ``path``: a GGUF file's stem, a checkpoint file's
    directory name (nanoGPT's ckpt.pt), else the directory's name."""
    path = Path(path).resolve()
    return path.stem if path.suffix == ".gguf" else path.parent.name if path.is_file() \
        else path.name
