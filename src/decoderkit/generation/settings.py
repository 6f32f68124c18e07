"""The one merge of generation settings, for both families, both servers and every command.

Sources, highest first: a server's request, the command's flags, the checkpoint's own
settings (a Hugging Face directory's ``generation_config.json``), then the built-in defaults.
Each setting is the first source's that says it (None or absent: not said), and
``Settled.origins`` names where each came from; ``Settled.notes`` lists the values taken from
a checkpoint ("temperature 0.6 (from generation_config.json)"), which the commands print and
the servers log. ``translate``, ``lm sample``, ``lm chat`` and both servers settle through
``settle`` with their family's defaults and ``Mode``; none of them decides it alone.

One rule joins settings: a family's ``Mode``, a switch between two ways of choosing tokens
(greedy or sampling; beam search or sampling). A user's source (request, flags) that says a
setting only one way uses has chosen that way (``lm sample --temperature 0.7`` samples, a
directory's ``do_sample: false`` then yields; a request's beam is not a draw), and a setting
of the way not taken comes from no source below the one that chose (``translate --sample`` on
a directory whose ``num_beams`` is 4 samples one row; a greedy run takes no temperature from
the directory).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

REQUEST = "the request"  # the name of a server request's source
FLAGS = "the flags"  # the name of a command's flags' source
BUILT_IN = "decoderkit's default"  # the origin of a value no source says


@dataclass(frozen=True)
class Source:
    """One source of settings, named in ``Settled.origins`` and notes."""

    name: str  # REQUEST, FLAGS, or the checkpoint's file ("generation_config.json")
    values: Mapping[str, object]  # setting -> value; None or absent: not said
    user: bool = True  # a user's (request, flags): what it says can choose the ``Mode``


@dataclass(frozen=True)
class Mode:
    """A switch between two ways of choosing tokens, and the settings only one way uses."""

    key: str  # the switch ("greedy", "sample")
    on: tuple[str, ...] = ()  # settings of the way the switch on takes (a user saying one: on)
    off: tuple[str, ...] = ()  # settings of the way the switch off takes
    shown: tuple[str, str] = ("off", "on")  # the switch's value in a note: (False, True)


@dataclass(frozen=True)
class Settled:
    """The settings a generation runs with, and where each came from."""

    values: dict[str, object]  # setting -> value, for every setting of the defaults
    origins: dict[str, str]  # setting -> the name of the source it came from (or BUILT_IN)
    notes: tuple[str, ...]  # "temperature 0.6 (from generation_config.json)", one a value
    # taken from a checkpoint


def settle(sources: Sequence[Source], builtin: Mapping[str, object],
           mode: Mode | None = None) -> Settled:
    """Every setting of ``builtin``: the first of ``sources`` (highest first) that says it,
    else ``builtin``'s; ``mode``'s switch first, chosen by the first source that says it or,
    a user's, one of its settings (a user's source saying settings of both ways: the switch
    off, so that the check of the chosen way's settings names them). A setting of the way not
    taken is taken only from a user's source at or above the one that chose."""
    for source in sources:
        unknown = set(source.values) - set(builtin)
        if unknown:
            raise TypeError(f"{source.name}: settings not known: {sorted(unknown)}")
    values, origins, notes = {}, {}, []

    def take(name: str, value: object, source: Source | None) -> None:
        values[name], origins[name] = value, BUILT_IN if source is None else source.name
        if source is not None and not source.user:
            notes.append(f"{name} {_shown(mode, name, value)} (from {source.name})")

    chose = len(sources)  # the index of the source that set the switch
    if mode is not None:
        chose, value = _switch(sources, mode)
        take(mode.key, builtin[mode.key] if value is None else value,
             sources[chose] if value is not None else None)
    for name in builtin:
        if mode is not None and name == mode.key:
            continue
        unused = mode is not None and name in (mode.off if values[mode.key] else mode.on)
        for i, source in enumerate(sources):
            said = source.values.get(name) is not None
            if said and not (unused and (i > chose or not source.user)):
                take(name, source.values[name], source)
                break
        else:
            take(name, builtin[name], None)
    return Settled(values, origins, tuple(notes))


def _switch(sources: Sequence[Source], mode: Mode) -> tuple[int, object | None]:
    """(the index of the source that sets ``mode``'s switch, its value); (len, None): none."""
    for i, source in enumerate(sources):
        if source.values.get(mode.key) is not None:
            return i, source.values[mode.key]
        if source.user:
            said = {k for k, v in source.values.items() if v is not None}
            if said & set(mode.off):
                return i, False
            if said & set(mode.on):
                return i, True
    return len(sources), None


def _shown(mode: Mode | None, name: str, value: object) -> str:
    """A setting's value in a note: the switch in its mode's words."""
    if mode is not None and name == mode.key:
        return mode.shown[bool(value)]
    return f"{value:g}" if isinstance(value, float) else str(value)
