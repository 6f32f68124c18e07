"""Batches (teacher-forcing shift, masks), bucketing, sharding and parallel corpora."""

import random

import pytest
import torch

from decoderkit.training.seq2seq.data import (
    bucket_batches,
    make_batch,
    read_parallel,
    read_tsv,
    shard,
    split_held_out,
)

PAD, BOS, EOS = 0, 1, 2


def test_batch_shift_padding_and_token_count():
    pairs = [([5, 6, 7], [8, 9]), ([5], [10, 11, 12, 13])]
    b = make_batch(pairs, PAD, BOS, EOS)
    assert b.src.tolist() == [[5, 6, 7], [5, PAD, PAD]]
    assert b.tgt_in.tolist() == [[BOS, 8, 9, PAD, PAD], [BOS, 10, 11, 12, 13]]
    assert b.labels.tolist() == [[8, 9, EOS, PAD, PAD], [10, 11, 12, 13, EOS]]
    assert b.n_tokens == 3 + 5
    # labels are the decoder input shifted left by one, ending in EOS
    for (_, t), inp, lab in zip(pairs, b.tgt_in.tolist(), b.labels.tolist(), strict=True):
        assert inp[1: len(t) + 1] == lab[: len(t)] and lab[len(t)] == EOS
    assert b.src_mask.shape == (2, 1, 3) and b.src_mask[1].tolist() == [[True, False, False]]
    assert b.tgt_mask.shape == (2, 5, 5)
    causal = torch.ones(5, 5, dtype=torch.bool).tril()
    assert torch.equal(b.tgt_mask[1], causal)
    assert torch.equal(b.tgt_mask[0], causal & torch.tensor([True, True, True, False, False]))


def test_sources_pad_with_their_own_id():
    """Marian's separate vocabularies: sources pad with src_pad_id, targets with pad_id."""
    b = make_batch([([5, 6, 7], [8]), ([5], [8, 9])], 10, 10, EOS, src_pad_id=4)
    assert b.src.tolist() == [[5, 6, 7], [5, 4, 4]]
    assert b.src_mask.tolist() == [[[True, True, True]], [[True, False, False]]]
    assert b.tgt_in.tolist() == [[10, 8, 10], [10, 8, 9]]
    assert b.labels.tolist() == [[8, EOS, 10], [8, 9, EOS]] and b.n_tokens == 5


def test_batch_with_other_special_ids_and_errors():
    b = make_batch([([3], [4])], pad_id=9, bos_id=7, eos_id=8)
    assert b.tgt_in.tolist() == [[7, 4]] and b.labels.tolist() == [[4, 8]]
    with pytest.raises(ValueError, match="at least one"):
        make_batch([], PAD, BOS, EOS)
    with pytest.raises(ValueError, match="empty"):
        make_batch([([], [4])], PAD, BOS, EOS)


def test_bucket_batches_cover_everything_once_with_little_padding():
    rng = random.Random(0)
    lengths = [rng.randint(1, 50) for _ in range(1000)]
    batches = bucket_batches(lengths, 16, seed=3, pool=10)
    flat = sorted(i for b in batches for i in b)
    assert flat == list(range(1000))
    assert all(len(b) <= 16 for b in batches)
    spread = sum(max(lengths[i] for i in b) - min(lengths[i] for i in b) for b in batches)
    random_batches = [list(range(i, min(i + 16, 1000))) for i in range(0, 1000, 16)]
    random_spread = sum(max(lengths[i] for i in b) - min(lengths[i] for i in b)
                        for b in random_batches)
    assert spread < random_spread / 4
    assert bucket_batches(lengths, 16, seed=3, pool=10) == batches
    assert bucket_batches(lengths, 16, seed=4, pool=10) != batches


def test_shard_gives_each_rank_an_equal_disjoint_share():
    batches = [[i] for i in range(7)]
    parts = [shard(batches, r, 3) for r in range(3)]
    assert [len(p) for p in parts] == [2, 2, 2]
    assert sorted(x for p in parts for x in p) == batches[:6]


def test_read_tsv_and_its_errors(tmp_path):
    good = tmp_path / "pairs.tsv"
    good.write_text("hello\tbonjour\n\nyes\toui\n")
    assert read_tsv(good) == [("hello", "bonjour"), ("yes", "oui")]
    bad = tmp_path / "bad.tsv"
    bad.write_text("a\tb\nno tab here\n")
    with pytest.raises(ValueError, match=r"bad.tsv:2: no TAB"):
        read_tsv(bad)
    empty = tmp_path / "empty.tsv"
    empty.write_text("\n\n")
    with pytest.raises(ValueError, match="empty corpus"):
        read_tsv(empty)
    blank = tmp_path / "blank.tsv"
    blank.write_text("a\t \n")
    with pytest.raises(ValueError, match=r"blank.tsv:1: empty target"):
        read_tsv(blank)
    with pytest.raises(ValueError, match="missing.tsv does not exist"):
        read_tsv(tmp_path / "missing.tsv")


def test_read_parallel_and_mismatched_counts(tmp_path):
    (tmp_path / "s.txt").write_text("a\nb\n")
    (tmp_path / "t.txt").write_text("x\ny\n")
    (tmp_path / "u.txt").write_text("x\n")
    assert read_parallel(tmp_path / "s.txt", tmp_path / "t.txt") == [("a", "x"), ("b", "y")]
    with pytest.raises(ValueError, match="s.txt has 2 lines but .*u.txt has 1"):
        read_parallel(tmp_path / "s.txt", tmp_path / "u.txt")


def test_split_held_out_is_a_seeded_partition():
    pairs = [(str(i), str(i)) for i in range(50)]
    train, valid = split_held_out(pairs, 5, seed=1)
    assert len(valid) == 5 and sorted(train + valid) == sorted(pairs)
    assert split_held_out(pairs, 5, seed=1) == (train, valid)
    with pytest.raises(ValueError, match="held-out size"):
        split_held_out(pairs, 50, seed=1)
