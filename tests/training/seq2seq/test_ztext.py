"""``training.seq2seq.ztext``: a zText module's files checked whole, each kind of damage one
line naming the module, the file and what is wrong (pysword would read each as empty verses)."""

import zlib

import pytest

from decoderkit.base.errors import UsageError
from decoderkit.training.seq2seq.ztext import BLOCK, RECORD, checked_texts, places
from training.seq2seq.bible_helpers import write_ztext

TEXT = "the lord said unto his people"


@pytest.fixture
def data(tmp_path):
    write_ztext(tmp_path, TEXT)
    return tmp_path


def damaged(data, match):
    with pytest.raises(UsageError, match=f"the SWORD module mod is damaged: {data}/{match}"):
        checked_texts("mod", data, "b", "kjv")


def test_a_whole_module_gives_every_record_text(data):
    texts = checked_texts("mod", data, "b", "kjv")
    assert len(texts) == places("kjv", "ot") + places("kjv", "nt") == 24115 + 8246
    assert texts[:3] == ["", "", TEXT] and texts.count("") == 4  # the headings of each testament
    assert set(texts) == {"", TEXT}


@pytest.mark.parametrize("cut", [1, RECORD.size])
def test_a_truncated_record_file_is_named(data, cut):
    records = data / "nt.bzv"
    records.write_bytes(records.read_bytes()[:-cut])
    what = "not a whole number of 10-byte verse records" if cut == 1 else \
        "holds 8,245 verse records where its versification has 8,246 places"
    damaged(data, f"nt.bzv .*{what}")


def test_a_truncated_text_file_is_named(data):
    text = data / "ot.bzz"
    text.write_bytes(text.read_bytes()[:-5])
    damaged(data, r"ot.bzz ends at byte .*, before block 0 .*\(truncated\?\)")


def test_a_truncated_block_table_is_named(data):
    (data / "ot.bzs").write_bytes(b"")
    damaged(data, "ot.bzv record 2 points at block 0; the block table lists 0")


def test_a_block_that_does_not_decompress_is_named(data):
    text = data / "ot.bzz"
    body = bytearray(text.read_bytes())
    body[2:6] = b"\xff\xff\xff\xff"
    text.write_bytes(bytes(body))
    damaged(data, "ot.bzz block 0 does not decompress")


def test_a_block_of_another_size_than_its_table_says_is_named(data):
    body = zlib.compress(b"short")
    (data / "ot.bzz").write_bytes(body)
    (data / "ot.bzs").write_bytes(BLOCK.pack(0, len(body), len(TEXT)))
    damaged(data, f"ot.bzz block 0 decompresses to 5 bytes; the block table says {len(TEXT)}")


def test_a_record_past_its_block_and_text_not_utf8_are_named(data):
    records = data / "ot.bzv"
    body = bytearray(records.read_bytes())
    body[20:30] = RECORD.pack(0, 3, len(TEXT))
    records.write_bytes(bytes(body))
    damaged(data, f"ot.bzv record 2 ends at byte {len(TEXT) + 3} of block 0")
    write_ztext(data, TEXT)
    raw = b"\xff" * len(TEXT)
    (data / "ot.bzz").write_bytes(zlib.compress(raw))
    (data / "ot.bzs").write_bytes(BLOCK.pack(0, len(zlib.compress(raw)), len(raw)))
    damaged(data, r"ot.bzv record 2 \(block 0\) is not UTF-8 text")


def test_a_missing_or_odd_file_is_one_line(data):
    (data / "nt.bzs").unlink()
    with pytest.raises(UsageError, match=f"the SWORD module mod's file {data}/nt.bzs does not "
                       "exist"):
        checked_texts("mod", data, "b", "kjv")
