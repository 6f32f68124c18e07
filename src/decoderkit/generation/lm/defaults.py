"""What a model directory asks of generation when the user does not say (Hugging Face's
``generation_config.json``), as a source of the one settings merge
(``generation.settings.settle``: the user's setting when given, else the directory's, noted,
else ``BUILTIN``), and the LM's ``MODE``: greedy and sampling exclude each other, a user who
sets a sampling setting samples (a directory's ``do_sample: false`` then yields), a greedy run
takes none of the directory's sampling settings.

The end of a sequence is every id of ``eos_ids`` (``generation_config.json``'s
``eos_token_id``, an int or a list: Llama 3 ends a turn with ``<|eot_id|>`` and a text with
``<|end_of_text|>``) and the tokenizer's own end-of-text ids (``end_ids``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from decoderkit.base.errors import UsageError
from decoderkit.generation.limits import check_int, check_sampling
from decoderkit.generation.settings import Mode, Source

if TYPE_CHECKING:
    from decoderkit.text.lm.tokenizer import LMTokenizer

SAMPLING = ("temperature", "top_k", "top_p")  # the settings that only a draw uses
# decoderkit's own default of each setting (lm sample's; the server has OpenAI's max_tokens)
BUILTIN = {"max_new_tokens": 200, "greedy": False, "temperature": 1.0, "top_k": 0, "top_p": 1.0}
# the LM's switch: greedy, or a draw with the sampling settings (a note says do_sample's words)
MODE = Mode("greedy", off=SAMPLING, shown=("off (do_sample true)", "on (do_sample false)"))


@dataclass(frozen=True)
class GenerationDefaults:
    """A directory's generation settings; None: it does not say."""

    source: str = ""  # the file they come from, named in notes ("" where there is none)
    eos_ids: tuple[int, ...] = ()  # ids that end a sequence (with the tokenizer's own)
    max_new_tokens: int | None = None  # tokens to generate at most
    greedy: bool | None = None  # True: the most likely token (HF's do_sample false)
    temperature: float | None = None  # draws from softmax(logits / temperature)
    top_k: int | None = None  # draws from the k most likely (0: all)
    top_p: float | None = None  # draws from the smallest set with this mass (1: all)

    def __post_init__(self):
        for i in self.eos_ids:
            check_int("eos_token_id", i, 0)
        if self.max_new_tokens is not None:
            check_int("max_new_tokens", self.max_new_tokens, 1)
        if self.greedy not in (None, True, False):
            raise UsageError(f"greedy must be a bool or None, got {self.greedy!r}")
        given = {k: getattr(self, k) for k in SAMPLING}
        check_sampling(*(BUILTIN[k] if v is None else v for k, v in given.items()))

    def end_ids(self, tokenizer: LMTokenizer | None = None) -> frozenset[int]:
        """The ids generation stops at: ``eos_ids`` and the tokenizer's own end-of-text ids
        (None: a model without a tokenizer). The one composition: the opened checkpoint, the
        server and every exporter's end ids."""
        return frozenset(self.eos_ids) | (frozenset() if tokenizer is None
                                          else frozenset(tokenizer.end_ids))

    def as_source(self, names: Iterable[str] = tuple(BUILTIN)) -> Source:
        """The settings ``names`` (of ``BUILTIN``) as the checkpoint's source of
        ``generation.settings.settle``."""
        return Source(self.source, {k: getattr(self, k) for k in names}, user=False)


NO_DEFAULTS = GenerationDefaults()  # a model that says nothing (ours, nanoGPT's)
