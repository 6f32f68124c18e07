"""How a translation decodes where the caller does not say: a checkpoint's own decoding
settings (``meta["generation"]``: a Hugging Face Marian directory's ``generation_config.json``
and config keys) as a source of the one settings merge (``generation.settings.settle``), and
``settled_options``, through which ``translate``, the translation server and the exports'
engines get their ``DecodeOptions``: the request's setting, else the flags', else the
checkpoint's, else ``DecodeOptions``' own default. ``MODE``: sampling is one row, so a beam
said below a user's ``sample`` yields (``translate --sample`` on a directory whose
``num_beams`` is 4 samples), and a user's beam is no draw.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from decoderkit.base.errors import UsageError
from decoderkit.generation.seq2seq.translate import DecodeOptions
from decoderkit.generation.settings import Mode, Settled, Source, settle

CHECKPOINT = "the checkpoint's generation_config.json / config.json"  # its source's name
DEFAULTS = {f.name: f.default for f in dataclasses.fields(DecodeOptions)}  # the built-in ones
MODE = Mode("sample", off=("beam",))  # sampling, or greedy / beam search


@dataclass(frozen=True)
class GenerationSettings:
    """A checkpoint's own decoding defaults (``meta["generation"]``: a Hugging Face directory's
    ``generation_config.json`` and config keys), used where a flag is not given."""

    beam: int = 1  # num_beams
    max_len: int | None = None  # max_length - 1 (HF counts the start token); None: per line
    length_penalty: float = 1.0  # length_penalty
    forced_eos: bool = False  # forced_eos_token_id is the EOS id
    ban_unk: bool = False  # <unk> never generated (a Marian .npz: its translator's default)


def generation_settings(meta: dict) -> GenerationSettings:
    """The settings a checkpoint's ``meta`` records (none: ``GenerationSettings()``)."""
    recorded = meta.get("generation", {})
    known = set(GenerationSettings.__dataclass_fields__)
    if not isinstance(recorded, dict) or not set(recorded) <= known:
        raise UsageError(f"the checkpoint's meta generation must be an object of {sorted(known)}"
                         f", got {recorded!r}"[:300])
    return GenerationSettings(**recorded)


def checkpoint_source(meta: dict) -> Source:
    """The settings a checkpoint's ``meta`` records, checked, as the merge's checkpoint source
    (a forced EOS that is off says nothing)."""
    generation_settings(meta)
    recorded = meta.get("generation", {})
    return Source(CHECKPOINT, {k: v for k, v in recorded.items() if v is not False},
                  user=False)


def settled_options(sources: Sequence[Source], meta: dict) -> tuple[DecodeOptions, Settled]:
    """(the ``DecodeOptions``, the merge that made them) of the user's ``sources`` (highest
    first: a request, the flags) over the checkpoint's ``meta`` and the built-in defaults."""
    settled = settle([*sources, checkpoint_source(meta)], DEFAULTS, MODE)
    return DecodeOptions(**settled.values), settled
