"""The model families' names, one spelling each: what every layer keys its per-family tables by
(the opener's formats, each engine's missing options, the servers' limits) and how messages
say them.

A family is a folder in every layer (``generation/seq2seq/``, ``generation/lm/``); the
classifier is an LM with a classification head (``nn/lm/classifier.py``, ``lm finetune``),
opened and refused as a family of its own. ``family`` reads a name as a caller gives it, the
spelling of before 0.3 (``"translation"``, ``interop.checkpoints``' old ``TRANSLATION``) too.
"""

from __future__ import annotations

import warnings

from decoderkit.base.errors import UsageError

SEQ2SEQ = "seq2seq"  # the encoder-decoder (translation): nn/seq2seq/
LM = "lm"  # the decoder-only language model (GPT, Llama): nn/lm/
CLASSIFIER = "classifier"  # an LM with a classification head: nn/lm/classifier.py
FAMILIES = (SEQ2SEQ, LM, CLASSIFIER)
# family -> how messages and --help say it: "the LM run", "(translation only; default 8)"
SAID = {SEQ2SEQ: "translation", LM: "LM", CLASSIFIER: "classifier"}
OLD = {"translation": SEQ2SEQ}  # a spelling before 0.3 -> the family's one spelling


def family(name: str) -> str:
    """The family ``name`` spells: one of ``FAMILIES``, or an old spelling (``OLD``) with a
    ``DeprecationWarning`` naming the new; anything else is refused naming the families."""
    if name in OLD:
        warnings.warn(f"the family {name!r} is spelled {OLD[name]!r} now "
                      f"(decoderkit.base.families)", DeprecationWarning, stacklevel=3)
        return OLD[name]
    if name not in FAMILIES:
        raise UsageError(f"no model family {name!r}: the families are {', '.join(FAMILIES)}")
    return name
