"""A SWORD zText module's files checked whole before anything of it is read or trusted.

pysword reads damage as empty text: a verse record past the end of a truncated index, a block
past the end of a truncated text file or one that does not decompress all give '' for the
verses they hold, so a truncated module became hundreds of "misaligned" chapters. Here each
testament's three files (``ot.bzv`` verse records, ``ot.bzs`` block table, ``ot.bzz``
compressed blocks; ``c``/``v`` for chapter or verse blocks) are checked: one record per place
of the versification, every block inside the file and decompressing to the size its table
says, every verse inside its block and UTF-8. Damage is one line naming the module, the file
and what is wrong. The verses' texts come back for a look at what the module really holds.
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

from decoderkit.base.errors import UsageError
from decoderkit.base.text import read_file

TESTAMENTS = ("ot", "nt")
BLOCK = struct.Struct("<III")  # .bzs: offset in .bzz, compressed size, decompressed size
RECORD = struct.Struct("<IIH")  # .bzv: block number, start in the block, length
DATA_BYTES = 256 << 20  # the most one module file may hold (the largest Bible: ~10 MB)


def places(versification: str, testament: str) -> int:
    """How many verse records a testament of ``versification`` has: a heading for the testament
    and each book and chapter, and each verse (pysword's canon, the index it reads by)."""
    from pysword.canons import canons

    books = canons[versification][testament]
    return 2 + sum(sum(lengths) + len(lengths) + 1 for *_, lengths in books)


def file_names(testament: str, block: str) -> tuple[str, str, str]:
    """The verse-record, block-table and text files of a testament; ``block`` is 'b' (book),
    'c' (chapter) or 'v' (verse), the module's BlockType."""
    return tuple(f"{testament}.{block}z{kind}" for kind in "vsz")


def checked_texts(name: str, data: Path, block: str, versification: str) -> list[str]:
    """Every verse record's text, both testaments, after checking the files (``UsageError``
    naming module ``name``, the file and the damage)."""
    texts = []
    for testament in TESTAMENTS:
        paths = [data / n for n in file_names(testament, block)]
        records, table, text = (read_file(p, f"the SWORD module {name}'s file", DATA_BYTES)
                                for p in paths)
        texts += _testament(lambda what, i, paths=paths: UsageError(
            f"the SWORD module {name} is damaged: {paths[i]} {what}"),
            records, table, text, places(versification, testament))
    return texts


def _testament(damage, records: bytes, table: bytes, text: bytes, needed: int) -> list[str]:
    """The texts of one testament's records; ``damage(what, file index)`` makes the error."""
    for i, (data, unit, what) in enumerate(((records, RECORD, "verse records"),
                                            (table, BLOCK, "block entries"))):
        if len(data) % unit.size:
            raise damage(f"is {len(data):,} bytes, not a whole number of {unit.size}-byte "
                         f"{what} (truncated?)", i)
    if len(records) // RECORD.size != needed:
        raise damage(f"holds {len(records) // RECORD.size:,} verse records where its "
                     f"versification has {needed:,} places (truncated?)", 0)
    blocks = [_block(damage, n, entry, text) for n, entry in enumerate(BLOCK.iter_unpack(table))]
    texts = []
    for n, (number, start, length) in enumerate(RECORD.iter_unpack(records)):
        if not length:
            texts.append("")
            continue
        if number >= len(blocks):
            raise damage(f"record {n:,} points at block {number:,}; the block table lists "
                         f"{len(blocks):,} (truncated?)", 0)
        if start + length > len(blocks[number]):
            raise damage(f"record {n:,} ends at byte {start + length:,} of block {number:,}, "
                         f"which holds {len(blocks[number]):,}", 0)
        try:
            texts.append(blocks[number][start:start + length].decode("utf-8"))
        except UnicodeDecodeError:
            raise damage(f"record {n:,} (block {number:,}) is not UTF-8 text", 0) from None
    return texts


def _block(damage, number: int, entry: tuple[int, int, int], text: bytes) -> bytes:
    """Block ``number`` decompressed, after checking it lies inside the text file and
    decompresses to the size the table gives."""
    offset, size, expected = entry
    if offset + size > len(text):
        raise damage(f"ends at byte {len(text):,}, before block {number:,} (bytes {offset:,}-"
                     f"{offset + size:,}) (truncated?)", 2)
    try:
        block = zlib.decompress(text[offset:offset + size])
    except zlib.error as err:
        raise damage(f"block {number:,} does not decompress ({err})", 2) from None
    if len(block) != expected:
        raise damage(f"block {number:,} decompresses to {len(block):,} bytes; the block table "
                     f"says {expected:,}", 2)
    return block
