"""Text lines from bytes, the one way every input is read: split on newlines only, decoded
as UTF-8 line by line, so a bad line can be named by its number."""

from __future__ import annotations

from decoderkit.base.errors import UsageError

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
