"""What a model directory asks of generation when the user does not say (Hugging Face's
``generation_config.json``), and the one rule that merges it with what the user asked.

``settle``: each setting is the user's when given, else the directory's when it has one, else
decoderkit's own; every value taken from the directory comes with a note naming its file
("temperature 0.6 (from generation_config.json)"), which ``lm sample`` prints and ``serve``
logs. Greedy and sampling exclude each other: a user who sets a sampling setting samples
(a directory's ``do_sample: false`` then yields), a user who asks for greedy decoding gets
none of the directory's sampling settings. ``lm sample`` and the server call ``settle``; none
of them decides it alone.

The end of a sequence is every id of ``eos_ids`` (``generation_config.json``'s
``eos_token_id``, an int or a list: Llama 3 ends a turn with ``<|eot_id|>`` and a text with
``<|end_of_text|>``) and the tokenizer's own end-of-text ids (``end_ids``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from decoderkit.base.errors import UsageError
from decoderkit.generation.limits import check_int, check_sampling

SAMPLING = ("temperature", "top_k", "top_p")  # the settings that only a draw uses
# decoderkit's own default of each setting (lm sample's; the server has OpenAI's max_tokens)
BUILTIN = {"max_new_tokens": 200, "greedy": False, "temperature": 1.0, "top_k": 0, "top_p": 1.0}


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

    def end_ids(self, tokenizer_ends: Iterable[int] = ()) -> frozenset[int]:
        """The ids generation stops at: ``eos_ids`` and the tokenizer's own."""
        return frozenset(self.eos_ids) | frozenset(tokenizer_ends)


@dataclass(frozen=True)
class Settled:
    """The settings a generation runs with, and where those not asked for came from."""

    values: dict[str, object]  # setting -> value, for every setting of ``builtin``
    notes: tuple[str, ...]  # "temperature 0.6 (from generation_config.json)", one a value


def settle(asked: Mapping[str, object | None], defaults: GenerationDefaults,
           builtin: Mapping[str, object] = BUILTIN) -> Settled:
    """Each setting of ``builtin``: ``asked``'s when not None, else ``defaults``' when not None
    (noted), else ``builtin``'s. Greedy: asked, else False when a sampling setting is asked,
    else the directory's, else the built-in; a greedy run takes no sampling setting from the
    directory."""
    unknown = set(asked) - set(builtin)
    if unknown:
        raise TypeError(f"settings not known: {sorted(unknown)}")
    sampling_asked = any(asked.get(k) is not None for k in SAMPLING)
    values, notes = {}, []
    for name in sorted(builtin, key=lambda k: k != "greedy"):  # greedy first: it rules the rest
        theirs = getattr(defaults, name)
        if asked.get(name) is not None:
            values[name] = asked[name]
        elif theirs is not None and not (name == "greedy" and sampling_asked) and not (
                name in SAMPLING and values["greedy"]):
            values[name] = theirs
            notes.append(f"{name} {_shown(name, theirs)} (from {defaults.source})")
        else:
            values[name] = builtin[name]
    return Settled(values, tuple(notes))


def _shown(name: str, value: object) -> str:
    """A setting's value in a note: greedy as do_sample's words."""
    if name == "greedy":
        return "on (do_sample false)" if value else "off (do_sample true)"
    return f"{value:g}" if isinstance(value, float) else str(value)



NO_DEFAULTS = GenerationDefaults()  # a model that says nothing (ours, nanoGPT's)
