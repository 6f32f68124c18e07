"""The one reader of a foreign config's values (a Hugging Face ``config.json``, nanoGPT's
``model_args``, Marian's options): each key is read with its type and bounds, and a value of
another type is refused naming the file, the key, what it must be and what it is, never
coerced (``"no"`` is not true, ``0`` is not "the default", ``null`` is not a bool).

A value's kind (``want``): a ``base.checks.Range`` (an integer or a finite number within
bounds; bools never count), ``bool``, ``str``, or a tuple of the accepted values themselves
(each compared with its type: ``1`` is not ``True``).
"""

from __future__ import annotations

import reprlib
from collections.abc import Mapping

from decoderkit.base.checks import Range
from decoderkit.base.errors import UsageError

REQUIRED = object()  # ``read_field``'s default: the key must be there


def shown(value: object) -> str:
    """A short repr of ``value`` for a message, safe on anything a JSON or pickle reader
    returns (nested 100,000 deep, or a megabyte of text)."""
    short = reprlib.Repr()
    short.maxlevel, short.maxstring, short.maxother, short.maxlist, short.maxdict = 2, 40, 40, 4, 4
    return short.repr(value)


def expected(want: Range | type | tuple, nullable: bool = False) -> str:
    """What ``want`` accepts, in words: 'an integer in [1, 512]', 'a bool', 'one of (...)'."""
    words = (want.span if isinstance(want, Range) else "a bool" if want is bool
             else "a string" if want is str else f"one of {want!r}")
    return f"{words} or null" if nullable else words


def accepts(want: Range | type | tuple, value: object) -> bool:
    """True if ``value`` is of the kind ``want`` (see the module docstring)."""
    if isinstance(want, Range):
        return want.accepts(value)
    if want in (bool, str):
        return type(value) is want
    return any(type(value) is type(choice) and value == choice for choice in want)


def read_field(settings: Mapping, key: str, want: Range | type | tuple, where: object, *,
               default: object = REQUIRED, nullable: bool = False) -> object:
    """``settings[key]`` (``default`` when absent; REQUIRED: it must be there) if it is of the
    kind ``want`` (or None, with ``nullable``); else a ``UsageError`` naming ``where`` (the
    file), the key, what it must be and what it is."""
    if key not in settings and default is REQUIRED:
        raise UsageError(f"{where}: {key} is missing (expected {expected(want, nullable)})")
    value = settings.get(key, default)
    if (value is None and nullable) or accepts(want, value):
        return value
    raise UsageError(f"{where}: {key} must be {expected(want, nullable)}, got "
                     f"{shown(value)} ({type(value).__name__})")


def check_vocabulary(file: object, vocab: Mapping[str, int]) -> None:
    """A vocabulary (token -> id) read from ``file`` must give each id in 0..n-1 to exactly
    one token; else a ``UsageError`` naming the first id given to several tokens, or the
    first one given to none."""
    owners: dict[int, list[str]] = {}
    for token, i in vocab.items():
        owners.setdefault(i, []).append(token)
    shared = next(((i, ts) for i, ts in sorted(owners.items()) if len(ts) > 1), None)
    if shared is not None:
        i, tokens = shared
        listed = shown(sorted(tokens))[1:-1]
        raise UsageError(f"{file}: id {i} is given to {len(tokens)} tokens ({listed}); each id "
                         "must name one token")
    gap = next((i for i in range(len(vocab)) if i not in owners), None)
    if gap is not None:
        raise UsageError(f"{file}: no token has the id {gap}, yet {len(vocab)} tokens need the "
                         f"ids 0..{len(vocab) - 1}")
