"""LM data: UTF-8 with the byte offset of a bad byte, the last 10% of each file held out,
windows never across files, batches fixed by (seed, index), non-overlapping held-out blocks."""

from pathlib import Path

import pytest
import torch

from decoderkit.base.errors import UsageError
from decoderkit.training.lm.data import (
    eval_blocks,
    held_out_at,
    load_text,
    random_batch,
    read_text,
)

HAMLET = Path(__file__).parents[2] / "fixtures" / "shakespeare_hamlet.txt"


def test_the_last_tenth_of_each_file_is_held_out(tmp_path):
    (tmp_path / "a.txt").write_text("abcdefghij" * 10)
    (tmp_path / "b.txt").write_text("\ufeff" + "klmno\n" * 50)  # a BOM is not text
    data = load_text([tmp_path / "a.txt", tmp_path / "b.txt"], 8)
    tok = data.tokenizer
    assert tok.kind == "char" and tok.decode(range(tok.vocab_size)) == "\nabcdefghijklmno"
    assert tok.decode(data.train[0].tolist()) == ("abcdefghij" * 10)[:90]
    assert tok.decode(data.valid[0].tolist()) == "abcdefghij"
    assert tok.decode(data.valid[1].tolist()) == ("klmno\n" * 50)[270:]
    assert held_out_at("x" * 1001) == 900 and data.train_tokens == 90 + 270


def test_bad_text_is_named(tmp_path):
    (tmp_path / "bad.txt").write_bytes("caf\u00e9 ok\n".encode() + b"\xff tail")
    with pytest.raises(UsageError, match=r"bad.txt: not UTF-8 \(byte 0xff at byte offset 9\)"):
        read_text(tmp_path / "bad.txt")
    (tmp_path / "empty.txt").write_bytes(b"")
    with pytest.raises(UsageError, match="empty.txt: empty text"):
        load_text([tmp_path / "empty.txt"], 8)
    (tmp_path / "short.txt").write_text("x" * 60)
    with pytest.raises(UsageError, match=r"short.txt: its held-out part \(last 10%\) is 6 "
                       "tokens, fewer than block size \\+ 1 = 9"):
        load_text([tmp_path / "short.txt"], 8)
    with pytest.raises(UsageError, match="missing.txt does not exist"):
        load_text([tmp_path / "missing.txt"], 8)


def test_a_given_tokenizer_names_the_characters_it_lacks(tmp_path):
    (tmp_path / "a.txt").write_text("ab" * 100)
    (tmp_path / "b.txt").write_text("abz" * 100)
    tok = load_text([tmp_path / "a.txt"], 4).tokenizer
    with pytest.raises(UsageError, match="b.txt: 1 character.* 'z'"):
        load_text([tmp_path / "b.txt"], 4, tokenizer=tok)


def test_bpe_is_learned_from_the_training_parts():
    data = load_text([HAMLET], 32, kind="bpe", vocab_size=400)
    assert data.tokenizer.kind == "bpe" and data.tokenizer.vocab_size == 400
    text = HAMLET.read_text()
    assert data.tokenizer.decode(data.valid[0].tolist()) == text[held_out_at(text):]


def test_batches_are_windows_of_one_file_fixed_by_seed_and_index():
    streams = [torch.arange(0, 20), torch.arange(100, 105)]
    seen = set()
    for index in range(200):
        b = random_batch(streams, 4, 4, seed=1, index=index)
        assert b.ids.shape == b.labels.shape == (4, 4) and b.n_tokens == 16
        assert torch.equal(b.ids[:, 1:], b.labels[:, :-1])  # labels: the next tokens
        assert torch.equal(b.labels[:, -1] - b.ids[:, -1], torch.ones(4, dtype=torch.long))
        seen.update(b.ids[:, 0].tolist())
    assert seen == set(range(0, 16)) | {100}  # every start, and only those inside one file
    a, b = random_batch(streams, 4, 4, 1, 7), random_batch(streams, 4, 4, 1, 7)
    assert torch.equal(a.ids, b.ids)
    assert not torch.equal(a.ids, random_batch(streams, 4, 4, 2, 7).ids)


def test_eval_blocks_cover_the_held_out_text_once():
    blocks = eval_blocks([torch.arange(0, 11), torch.arange(20, 27)], 3)
    assert [b.tolist() for b in blocks] == [[0, 1, 2, 3], [3, 4, 5, 6], [6, 7, 8, 9],
                                            [20, 21, 22, 23], [23, 24, 25, 26]]
    picked = eval_blocks([torch.arange(0, 101)], 1, limit=10)
    assert [int(b[0]) for b in picked] == list(range(0, 100, 10))
