"""Text files, the one way every input is read by both families: the file checked first
(``read_file``: a regular file, never a pipe or a device that would be read forever), then
split on newlines only and decoded as UTF-8 line by line, so a bad line is named by its number
(``read_lines``: corpora), or decoded whole (``read_text``: a language model's text), or
parsed as JSON (``read_json``: every config, vocabulary and manifest of any format)."""

from __future__ import annotations

import json
from pathlib import Path

from decoderkit.base.errors import UsageError
from decoderkit.base.files import TEXT_BYTES, check_input_file

BOM = "\ufeff"  # a UTF-8 byte-order mark some editors put first: not part of the text


def split_lines(data: bytes) -> list[bytes]:
    """Lines of ``data`` split on b"\\n" only (U+2028, form feeds etc. stay inside their line);
    a "\\r" before the newline is dropped; a final newline does not start an empty line."""
    lines = data.split(b"\n")
    if lines[-1] == b"":
        lines.pop()
    return [line.removesuffix(b"\r") for line in lines]


def decode_line(line: bytes, first: bool = False) -> str:
    """``line`` as UTF-8 text (a leading BOM dropped on the ``first`` line); not UTF-8 is a
    ``UsageError`` naming the byte and its column."""
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as err:
        column = len(line[:err.start].decode("utf-8", "replace")) + 1
        raise UsageError(f"not UTF-8 (byte 0x{line[err.start]:02x} at column {column})") from None
    return text.removeprefix(BOM) if first else text


def check_text(text: object, what: str = "the text") -> str:
    """``text`` if it is a str that UTF-8 can encode; a non-str is a ``TypeError`` (a bug), a
    lone surrogate a ``UsageError`` naming ``what`` and the character: what Python makes of a
    command-line byte that is not UTF-8 (U+DC80..U+DCFF: the byte + 0xDC00), or a JSON
    '\\udcff', which tokenizers cannot take."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        code = ord(text[err.start])
        found = (f"byte 0x{code - 0xDC00:02x}, not UTF-8," if 0xDC80 <= code <= 0xDCFF
                 else f"a lone surrogate U+{code:04X}")
        raise UsageError(f"{what} is not Unicode text: {found} at character "
                         f"{err.start + 1}") from None
    return text


WHOLE_FILE_BYTES = 4 << 30  # the largest file read whole into memory (a corpus, a text to score)


def read_file(path: str | Path, what: str = "file", max_bytes: int = WHOLE_FILE_BYTES) -> bytes:
    """The bytes of ``path``, which must be a regular file of at most ``max_bytes``
    (``check_input_file``; ``what`` names its role in the message: '--text'); unreadable is a
    ``UsageError`` naming it."""
    path = check_input_file(path, what, max_bytes)  # no pipe, no device, nothing huge
    try:
        return path.read_bytes()
    except OSError as err:
        raise UsageError(f"{path}: cannot read ({err.strerror or err})") from None


def read_lines(path: str | Path, what: str = "file") -> list[str]:
    """The lines of a UTF-8 text file (``split_lines``: newlines only, a leading BOM dropped);
    unreadable or not UTF-8 is a ``UsageError`` naming the file and line."""
    lines = []
    for number, line in enumerate(split_lines(read_file(path, what)), 1):
        try:
            lines.append(decode_line(line, first=number == 1))
        except UsageError as err:
            raise UsageError(f"{path}:{number}: {err}") from None
    return lines


def read_text(path: str | Path, what: str = "file") -> str:
    """A UTF-8 text file whole (a leading BOM dropped); bytes that are not UTF-8, or no text,
    are a ``UsageError`` naming the file (and the byte offset)."""
    data = read_file(path, what)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise UsageError(f"{path}: not UTF-8 (byte 0x{data[err.start]:02x} at byte offset "
                         f"{err.start})") from None
    text = text.removeprefix(BOM)
    if not text:
        raise UsageError(f"{path}: empty text")
    return text


JSON_DEPTH = 64  # the deepest nesting of a JSON file read (configs, vocabularies: under 10)


def json_depth(value: object) -> int:
    """How deep lists and objects nest in ``value`` (a scalar: 0), counted without recursion."""
    deepest, todo = 0, [(value, 1)]
    while todo:
        item, depth = todo.pop()
        if isinstance(item, (dict, list)):
            deepest = max(deepest, depth)
            todo.extend((x, depth + 1) for x in (item.values() if isinstance(item, dict)
                                                 else item))
    return deepest


def read_json(path: str | Path, what: str = "the file", max_bytes: int = TEXT_BYTES) -> object:
    """The JSON value in ``path``, a regular file of at most ``max_bytes`` (``what`` names its
    role); not UTF-8, not JSON (line and column named) or nested deeper than ``JSON_DEPTH``
    (no message, repr or check of it could then recurse) is one ``UsageError`` naming the
    file."""
    data = read_file(path, what, max_bytes)
    try:
        value = json.loads(data.decode("utf-8"))
        deep = json_depth(value) > JSON_DEPTH
    except UnicodeDecodeError as err:
        raise UsageError(f"{path}: not valid JSON (not UTF-8: byte 0x{data[err.start]:02x} at "
                         f"byte offset {err.start})") from None
    except json.JSONDecodeError as err:
        raise UsageError(f"{path}: not valid JSON ({err.msg} at line {err.lineno} column "
                         f"{err.colno})") from None
    except RecursionError:  # deeper than Python's recursion limit
        deep = True
    if deep:
        raise UsageError(f"{path}: JSON nested too deeply to read (more than {JSON_DEPTH} "
                         "levels: a damaged or hostile file)")
    return value
