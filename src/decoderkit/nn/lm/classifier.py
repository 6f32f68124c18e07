"""GPT-1's fine-tuning model (Radford et al. 2018, §3.2-3.3): a pretrained ``DecoderOnlyLM``
with three new tokens (start, delimiter, extract) and a linear head on the final state at the
extract token: P(y | x) = softmax(h_extract W_y).

The input transformation: ``<s> text <e>`` for one text, ``<s> text1 $ text2 <e>`` for a pair
(start, delimiter, extract). The new tokens are new embedding rows after the model's own
(ids V, V + 1, V + 2), so the same holds for character and BPE vocabularies: no text can
produce them. A config without them (an HF ``GPT2ForSequenceClassification`` opened here)
reads the last token of the text as it is, as Hugging Face does.

Legend: B batch, T positions, d = d_model, V the pretrained vocabulary, C classes.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from decoderkit.base.checks import FRACTION, VOCAB, check_fields
from decoderkit.base.config import JsonConfig
from decoderkit.base.errors import UsageError
from decoderkit.nn.lm.model import DecoderOnlyLM, INIT_STD

NEW_TOKENS = ("start", "delimiter", "extract")  # GPT-1's input transformation, in id order
SPECIAL_IDS = ("start_id", "delimiter_id", "extract_id")  # the ClassifierConfig fields
MAX_LABELS = 10_000  # classes a classifier may have (a head of d x C weights, C logits a row)


def check_label_count(n: int, where: str) -> None:
    """The one bound on the number of a classifier's classes, ``MAX_LABELS``; more is a
    ``UsageError`` naming ``where`` (the labels' file or field) before any head is built."""
    if n > MAX_LABELS:
        raise UsageError(f"{where}: {n:,} distinct labels; a classifier takes at most "
                         f"{MAX_LABELS:,} (MAX_LABELS)")


@dataclass(frozen=True)
class ClassifierConfig(JsonConfig):
    """The head and the input transformation; saved as classifier.json beside config.json."""

    KIND = "classifier"

    labels: tuple[str, ...]  # class names, class i = labels[i] (at least 2, distinct)
    start_id: int | None = None  # <s> before the text (None: no transformation, HF's)
    delimiter_id: int | None = None  # $ between the two texts of a pair
    extract_id: int | None = None  # <e> after the text: the head reads its final state
    dropout: float = 0.1  # dropout on h_extract before the head (GPT-1: 0.1)
    pairs: bool | None = None  # its input: True a pair of texts, False one text; None: not
    # recorded (a run of an earlier release)

    def __post_init__(self):
        object.__setattr__(self, "labels", tuple(self.labels))  # JSON gives a list
        check_label_count(len(self.labels), "labels")
        if self.pairs is not None and not isinstance(self.pairs, bool):
            raise UsageError(f"pairs must be true, false or null, got {self.pairs!r}")
        if len(self.labels) < 2 or len(set(self.labels)) != len(self.labels) or \
                not all(isinstance(x, str) and x for x in self.labels):
            raise UsageError(f"labels must be at least 2 distinct non-empty names, got "
                             f"{list(self.labels)[:10]!r}")
        check_fields(self, {"dropout": FRACTION})
        ids = [getattr(self, name) for name in SPECIAL_IDS]
        if any(i is not None for i in ids):
            for name, value in zip(SPECIAL_IDS, ids, strict=True):
                VOCAB.check(name, value)
            if len(set(ids)) != 3:
                raise UsageError(f"start_id, delimiter_id and extract_id must differ, got {ids}")

    @property
    def transformed(self) -> bool:
        """True when inputs get GPT-1's start/delimiter/extract tokens."""
        return self.start_id is not None

    @property
    def takes_pairs(self) -> bool | None:
        """True for a pair of texts, False for one text (always, without a delimiter token);
        None where the run did not record it."""
        return self.pairs if self.transformed else False


def with_new_tokens(lm: DecoderOnlyLM, n: int) -> DecoderOnlyLM:
    """A copy of ``lm`` with ``n`` embedding rows added after its own (ids V .. V + n - 1),
    each N(0, 0.02^2) as GPT's embeddings are initialised (drawn from the global RNG); an
    untied head gets the same new rows. The model's existing weights are unchanged."""
    c = lm.config
    grown = DecoderOnlyLM(dataclasses.replace(c, vocab_size=c.vocab_size + n))
    state = copy.deepcopy(lm.state_dict())
    for name in ("embed.lut.weight",) + (() if c.tie_head else ("generator.proj.weight",)):
        old = state[name]
        state[name] = torch.cat([old, INIT_STD * torch.randn(n, old.size(1), dtype=old.dtype)])
    if c.tie_head:
        state["generator.proj.weight"] = state["embed.lut.weight"]
    grown.to(lm.embed.lut.weight.dtype).load_state_dict(state)
    return grown.to(lm.embed.lut.weight.device).train(lm.training)


def classifier_config(lm: DecoderOnlyLM, labels: tuple[str, ...], dropout: float = 0.1,
                      pairs: bool | None = None) -> ClassifierConfig:
    """The config of a head over ``lm`` grown by ``with_new_tokens(lm, 3)``: start, delimiter
    and extract are ids V, V + 1, V + 2 of the pretrained vocabulary V; ``pairs``: its input."""
    v = lm.config.vocab_size
    return ClassifierConfig(labels, v, v + 1, v + 2, dropout, pairs)


def transform(config: ClassifierConfig, first: list[int], second: list[int] | None = None
              ) -> list[int]:
    """GPT-1's input transformation of token ids: ``[<s>] first [$ second] [<e>]``; without
    the new tokens (``config.transformed`` False) the text as it is (one text only)."""
    if not config.transformed:
        if second is not None:
            raise UsageError("this classifier has no delimiter token: it classifies one text, "
                             "not a pair")
        return list(first)
    middle = list(first) if second is None else [*first, config.delimiter_id, *second]
    return [config.start_id, *middle, config.extract_id]


class GPTClassifier(nn.Module):
    """ids (B, T), positions (B,) -> class logits (B, C): the LM's final hidden state at each
    row's position (its extract token), dropout, then ``head`` (d -> C, no bias: GPT-1's W_y).

    ``lm`` is the grown language model (its ``logits`` give the auxiliary LM loss).
    """

    def __init__(self, lm: DecoderOnlyLM, config: ClassifierConfig):
        super().__init__()
        if not isinstance(config, ClassifierConfig):
            raise TypeError(f"config must be a ClassifierConfig, got {type(config).__name__}")
        if config.transformed and config.extract_id >= lm.config.vocab_size:
            raise UsageError(f"the extract token {config.extract_id} is outside the model's "
                             f"vocabulary of {lm.config.vocab_size} (grow it: with_new_tokens)")
        self.lm, self.config = lm, config
        self.dropout = nn.Dropout(config.dropout)
        self.head = nn.Linear(lm.config.d_model, len(config.labels), bias=False)
        nn.init.normal_(self.head.weight, 0.0, INIT_STD)
        self.head.to(lm.embed.lut.weight)

    def pooled(self, h: Tensor, at: Tensor) -> Tensor:
        """Hidden states (B, T, d) -> class logits (B, C) read at positions ``at`` (B,)."""
        return self.head(self.dropout(h[torch.arange(h.size(0), device=h.device), at]))

    def forward(self, ids: Tensor, at: Tensor) -> Tensor:
        """ids (B, T), at (B,) -> class logits (B, C)."""
        return self.pooled(self.lm.features(ids), at)
