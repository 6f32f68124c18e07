"""What a chat template may build, checked before it is built: the sizes behind the sandbox's
``MAX_RENDERED_CHARS`` (``text.lm.sandbox``).

An operation is refused (``TemplateFailed``) when what it would build, counted from its
operands, passes the bound, before it runs: a repetition (``'x' * n``, a list's), a
concatenation, a join (its separator counted once per gap), a number (``a * b``, ``a ** b``:
at most ``MAX_INT_BITS`` bits), a format (``'%s' % x``, ``str.format``, ``|format``: every
number in the format string counted as a width, each field as large as the largest argument),
``|indent`` (the indent once per line), ``|replace`` and ``str.replace`` (each occurrence
grown), ``str.expandtabs``, ``str.translate``, ``|wordwrap``, ``lipsum`` (its words),
``strftime_now``, and every value turned into text (``{{ x }}``, ``~``, ``|string``,
``|tojson`` with its indent, ``|pprint``, a format's arguments) by ``text_size``, which counts
the text a value's ``str`` or JSON would have, each shared reference again
(``dict.fromkeys(range(300), 'x' * 1000000)`` is 300 MB of text in 300 entries), and stops
counting once past the bound. ``|sum`` adds numbers only (adding lists is quadratic).
"""

from __future__ import annotations

import functools
import math
import re

import jinja2
import jinja2.filters
import jinja2.utils

from decoderkit.base.errors import UsageError

MAX_RENDERED_CHARS = 1 << 20  # a rendered prompt's characters, and any value built in one step
MAX_INT_BITS = 1 << 16  # the largest integer a template computes (a chat template needs few)
_NUMBER = re.compile(r"\d+")  # a number in a format string: a width or precision, maybe
SCALAR_CHARS = 32  # the text of a float, None, a bool or an object's repr, at most (about)


class TemplateFailed(UsageError):
    """A chat template that raised (its own message), failed on these messages, or passed a
    bound; ``field`` is the request field at fault ("messages")."""

    field = "messages"


def check_size(size: int, what: str) -> None:
    """``TemplateFailed`` if ``size`` (characters or items) passes ``MAX_RENDERED_CHARS``."""
    if size > MAX_RENDERED_CHARS:
        raise TemplateFailed(f"the chat template builds {what} of {size} items, more than "
                             f"{MAX_RENDERED_CHARS}")


def text_size(value: object, indent: int = 0) -> int:
    """At least the characters of ``value``'s text (``str``, ``repr`` or JSON with ``indent``
    spaces a level), counted without building it; past ``MAX_RENDERED_CHARS`` it stops."""
    total, stack = 0, [(iter((value,)), 0)]
    while stack and total <= MAX_RENDERED_CHARS:
        items, depth = stack[-1]
        x = next(items, stack)
        if x is stack:
            stack.pop()
            continue
        total += 2 + (1 + depth * indent if indent else 0)  # quotes or a separator; a newline
        if isinstance(x, (str, bytes)):
            total += len(x)
        elif isinstance(x, int) and not isinstance(x, bool):
            total += x.bit_length() // 3
        elif isinstance(x, dict):
            stack.append((iter(x.items()), depth + 1))
        elif isinstance(x, (list, tuple, set, frozenset)):
            stack.append((iter(x), depth + 1))
        elif isinstance(x, jinja2.utils.Namespace):
            stack.append((iter(x._Namespace__attrs.items()), depth + 1))
        else:
            total += SCALAR_CHARS
    return total


def check_text(value: object, what: str = "a text", indent: int = 0) -> None:
    """``check_size`` of ``value``'s text (``text_size``), a string's own length at once."""
    check_size(len(value) if isinstance(value, str) else text_size(value, indent), what)


def check_arguments(args: tuple, kwargs: dict) -> None:
    """An integer argument past the bound (a width, a count) is refused before the call."""
    for value in (*args, *kwargs.values()):
        if isinstance(value, int) and not isinstance(value, bool) and \
                abs(value) > MAX_RENDERED_CHARS:
            raise TemplateFailed(f"the chat template passes {value} to a function or filter, "
                                 f"more than {MAX_RENDERED_CHARS}")


def check_number(bits: float, what: str) -> None:
    if bits > MAX_INT_BITS:
        raise TemplateFailed(f"the chat template computes {what}, a number of about "
                             f"{int(bits)} bits, more than {MAX_INT_BITS}")


def check_binop(operator: str, left: object, right: object) -> None:
    """The sandbox's ``*``, ``**``, ``+`` and ``%``, sized from their operands."""
    ints = all(isinstance(v, int) for v in (left, right))
    sequence = (str, bytes, list, tuple)
    if operator == "*" and ints:
        check_number(abs(left).bit_length() + abs(right).bit_length(),
                     f"{_shown(left)} * {_shown(right)}")
    elif operator == "*":
        for seq, n in ((left, right), (right, left)):
            if isinstance(seq, sequence) and isinstance(n, int):
                check_size(len(seq) * n, "a repeated value")
    elif operator == "**" and ints and abs(left) > 1:
        check_number(right * math.log2(abs(left)), f"{_shown(left)} ** {_shown(right)}")
    elif operator == "+" and isinstance(left, sequence) and isinstance(right, sequence):
        check_size(len(left) + len(right), "a concatenation")
    elif operator == "%" and isinstance(left, str):
        values = right.values() if isinstance(right, dict) else \
            right if isinstance(right, tuple) else (right,)
        check_format(left, left.count("%"), values)


def _shown(n: int) -> str:
    """An integer as a message shows it (a big one by its size: no huge decimal text)."""
    return str(n) if n.bit_length() < 64 else f"a {n.bit_length()}-bit number"


def check_format(text: str, fields: int, values) -> None:
    """A format of ``text`` with ``fields`` fields and ``values``: every number in ``text``
    counted as a width, every integer value as one (``'%*s'``), each field as the largest
    value's text."""
    values = list(values)
    widest = max((text_size(v) for v in values), default=0)
    widths = sum(int(n) if len(n) < 8 else MAX_RENDERED_CHARS + 1 for n in _NUMBER.findall(text))
    given = sum(abs(v) for v in values if isinstance(v, int) and not isinstance(v, bool))
    check_size(len(text) + widths + given + fields * widest, "a formatted text")


def check_join(separator: str, items: list) -> None:
    """``separator.join(items)`` / ``items|join(separator)``: the items' texts and a
    separator per gap."""
    size = sum(len(x) if isinstance(x, str) else text_size(x) for x in items)
    check_size(size + len(separator) * max(len(items) - 1, 0), "a joined text")


def check_replace(text: str, old: str, new: str, count: int | None = None) -> None:
    """``text.replace(old, new, count)``: each occurrence grown by ``new`` over ``old``."""
    if not all(isinstance(x, str) for x in (text, old, new)):
        return  # a TypeError of the call itself
    found = len(text) + 1 if old == "" else text.count(old)
    if count is not None and count >= 0:
        found = min(found, count)
    check_size(len(text) + found * max(len(new) - len(old), 0), "a replaced text")


def check_method(method, args: tuple, kwargs: dict) -> tuple:
    """A string method the template calls, sized from its arguments before it runs; the
    arguments to call it with (a join's items listed once)."""
    text, name = getattr(method, "__self__", None), getattr(method, "__name__", None)
    if not isinstance(text, (str, bytes)):
        return args
    if name == "join" and args:
        items = list(args[0])
        check_join(text, items)
        return (items, *args[1:])
    if name == "replace" and len(args) >= 2:
        check_replace(text, *args[:2], args[2] if len(args) > 2 else kwargs.get("count"))
    elif name == "expandtabs":
        tab = args[0] if args else kwargs.get("tabsize", 8)
        check_size(len(text) + text.count("\t") * max(tab, 0), "an expanded text")
    elif name == "translate" and args and isinstance(args[0], dict):
        most = max((text_size(v) for v in args[0].values()), default=1)
        check_size(len(text) * most, "a translated text")
    elif name in ("format", "format_map"):
        given = [*args, *kwargs.values()] + (list(args[0].values()) if name == "format_map"
                                             and args and isinstance(args[0], dict) else [])
        check_format(text, text.count("{"), given)
    return args


def _indent(s, width=4, *rest, **kwargs) -> None:
    check_text(s)
    lines = str(s).count("\n") + 1
    check_size(len(str(s)) + lines * (len(width) if isinstance(width, str) else width),
               "an indented text")


def _wordwrap(s, width=79, break_long_words=True, wrapstring=None, *rest, **kwargs) -> None:
    check_text(s)
    check_size(len(str(s)) * (1 + len(wrapstring or "\n")), "a wrapped text")


def _sum(iterable, attribute=None, start=0) -> None:
    if not isinstance(start, (int, float)):
        raise TemplateFailed("the chat template sums values that are not numbers (|sum adds "
                             "numbers only)")


def _tojson(x, ensure_ascii=False, indent=None, *rest, **kwargs) -> None:
    width = len(indent) if isinstance(indent, str) else indent or 0
    check_text(x, "a JSON text", width)


# filter name -> the check of what it would build, given its arguments (a filter not named
# here builds at most what its value's text is, checked by ``check_text`` when it is text, or
# items of what it is given)
FILTER_CHECKS = {
    "indent": _indent, "wordwrap": _wordwrap, "sum": _sum, "tojson": _tojson,
    "replace": lambda s, old="", new="", count=None, *r, **k: (check_text(s), check_replace(
        str(s), old, new, count)),
    "format": lambda s, *args, **kwargs: check_format(str(s), str(s).count("%"),
                                                      [*args, *kwargs.values()]),
    "join": lambda items, d="", attribute=None: check_join(str(d), list(items)),
}
TEXT_FILTERS = frozenset({  # filters that turn their value into text
    "string", "e", "escape", "forceescape", "pprint", "safe", "center", "truncate", "title",
    "capitalize", "upper", "lower", "trim", "striptags", "urlencode", "urlize", "wordcount",
    "xmlattr", "filesizeformat"})


def bounded_filter(name: str, f):
    """Filter ``f`` with its integer arguments checked and what it builds sized first
    (``FILTER_CHECKS``, ``TEXT_FILTERS``); not the context a ``pass_context`` filter is given
    first. jinja2's marks are kept by ``wraps``."""
    given = 1 + (jinja2.utils._PassArg.from_obj(f) is not None)

    @functools.wraps(f)
    def checked(*args, **kwargs):
        check_arguments(args[given:], kwargs)
        value, rest = args[given - 1], args[given:]
        if name == "join":  # the value joined, listed once
            value = list(value)
            args = (*args[:given - 1], value, *rest)
        if name in FILTER_CHECKS:
            FILTER_CHECKS[name](value, *rest, **kwargs)
        elif name in TEXT_FILTERS:
            check_text(value)
        return f(*args, **kwargs)
    return checked


def lipsum(n=5, html=True, min=20, max=100):  # noqa: A002 - jinja2's parameter names
    """jinja2's ``lipsum``, its words (about 12 characters each, at most) counted first."""
    check_arguments((n, min, max), {})
    check_size(abs(n) * abs(max) * 12, "a lorem ipsum text")
    return jinja2.utils.generate_lorem_ipsum(n, html, min, max)


def check_strftime(format: str) -> None:  # noqa: A002 - transformers' parameter name
    """``strftime_now(format)``: each directive counted as 64 characters."""
    check_size(len(format) + 64 * format.count("%"), "a formatted date")
