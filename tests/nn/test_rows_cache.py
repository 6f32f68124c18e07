"""nn.rows_cache: one layer's keys and values of rows of different lengths in shared buffers.
A row's attention is the same bit for bit alone and among longer and shorter companions, in
any slot and any group (the property continuous batching's guarantee rests on); it equals the
reference attention over the row's own keys; ``move`` copies a slot."""

from __future__ import annotations

import pytest
import torch

from decoderkit.nn.attention import attention
from decoderkit.nn.rows_cache import (
    PAGE,
    ROWS_CHUNK,
    ROWS_GROUP,
    SMALL_MATMUL,
    RowsKVCache,
    page_aligned,
)


def filled(rows: list[tuple[torch.Tensor, torch.Tensor]], h: int, L: int, d_k: int):
    """A RowsKVCache whose slot i holds rows[i]'s keys and values (1, h, n_i, d_k)."""
    cache = RowsKVCache(h, L, d_k, dtype=torch.float32, device="cpu")
    for i, (k, v) in enumerate(rows):
        slot = cache.slot(i, L)
        slot.keys.zero_()
        slot.values.zero_()
        slot.update(k, v)
    return cache


def step(cache: RowsKVCache, lengths: list[int], q, k, v) -> torch.Tensor:
    """One step of the first len(lengths) slots: q, k, v (B, h, 1, d_k) -> (B, h, 1, d_k)."""
    cache.begin(cache.plan(torch.tensor(lengths), cache.step_window(max(lengths) + 1)))
    cache.update(k, v)
    return cache.attend(q)


@pytest.mark.parametrize("h, d_k, L", [(12, 64, 1024), (4, 8, 48), (4, 8, 96)],
                         ids=["gpt2", "small", "small-head-long-context"])
def test_a_rows_attention_alone_equals_it_among_companions(h, d_k, L):
    """Bit for bit (torch.equal): a row alone (its own window) against the same row in slot
    j of 2, 16 and 20 rows (two groups) whose lengths put the window far past its own. With
    d_k 8 and 96 positions a window of 16 or 32 would multiply through PyTorch's own loop and
    a longer one through BLAS (``SMALL_MATMUL``): ``step_window`` never lets it cross."""
    g = torch.Generator().manual_seed(0)

    def rand(*shape):
        return torch.randn(*shape, generator=g)

    checked = 0
    for n in sorted({1, 5, 15, 16, 17, L // 3, L // 2, L - 2}):
        mine = (rand(1, h, n, d_k), rand(1, h, n, d_k))
        new = [rand(1, h, 1, d_k) for _ in range(3)]  # its q, k, v this step
        alone = step(filled([mine], h, L, d_k), [n], *new)
        for B, j in ((2, 1), (16, 7), (ROWS_GROUP + 4, ROWS_GROUP + 2)):
            lengths = torch.randint(1, L - 1, (B,), generator=g).tolist()
            lengths[j], lengths[0] = n, max(lengths[0], L - 2)  # a companion near the context
            rows = [(rand(1, h, m, d_k), rand(1, h, m, d_k)) for m in lengths]
            rows[j] = mine
            qkv = [rand(B, h, 1, d_k) for _ in range(3)]
            for t, x in zip(qkv, new, strict=True):
                t[j] = x[0]
            out = step(filled(rows, h, L, d_k), lengths, *qkv)
            assert torch.equal(out[j:j + 1], alone), (n, B)
            checked += 1
    assert checked >= 18


def test_a_rows_attention_is_the_reference_over_its_own_keys():
    g = torch.Generator().manual_seed(1)
    h, d_k, L, lengths = 3, 8, 40, [4, 17, 1]
    rows = [(torch.randn(1, h, n, d_k, generator=g), torch.randn(1, h, n, d_k, generator=g))
            for n in lengths]
    q, k, v = (torch.randn(3, h, 1, d_k, generator=g) for _ in range(3))
    out = step(filled(rows, h, L, d_k), lengths, q, k, v)
    for i, (keys, values) in enumerate(rows):
        keys, values = torch.cat([keys, k[i:i + 1]], 2), torch.cat([values, v[i:i + 1]], 2)
        want = attention(q[i:i + 1].double(), keys.double(), values.double())[0]
        torch.testing.assert_close(out[i:i + 1].double(), want, rtol=1e-5, atol=1e-6)


def test_move_copies_a_slots_filled_positions():
    h, d_k, L = 2, 4, 16
    rows = [(torch.full((1, h, n, d_k), float(n)), torch.full((1, h, n, d_k), -float(n)))
            for n in (3, 5)]
    cache = filled(rows, h, L, d_k)
    cache.move(1, 0, 5)
    keys, values = cache.groups[0].keys, cache.groups[0].values
    assert keys[0, :, :5].eq(5).all() and values[0, :, :5].eq(-5).all()
    assert keys[1, :, :5].eq(5).all()  # the source is left as it was


def test_the_window_is_whole_chunks_past_the_small_matmul_loop_and_within_the_capacity():
    cache = RowsKVCache(2, 96, 8, dtype=torch.float32, device="cpu")
    assert [cache.step_window(n) for n in (1, 50, 64, 65, 96)] == [64, 64, 64, 80, 96]
    assert all(w % ROWS_CHUNK == 0 and w * 8 >= SMALL_MATMUL for w in (64, 80, 96))
    small = RowsKVCache(2, 48, 8, dtype=torch.float32, device="cpu")
    assert {small.step_window(n) for n in (1, 17, 48)} == {48}  # always the capacity
    assert RowsKVCache(12, 1024, 64, dtype=torch.float32, device="cpu").step_window(17) == 32


def test_group_buffers_start_at_a_page_boundary():
    cache = RowsKVCache(12, 1024, 64, dtype=torch.float32, device="cpu")
    slot = cache.slot(0, 1024)
    assert slot.keys.data_ptr() % PAGE == 0 and slot.values.data_ptr() % PAGE == 0
    assert cache.groups[0].keys.shape == (ROWS_GROUP, 12, 1024, 64)
    t = page_aligned((3, 5), torch.float64, "cpu")
    assert t.shape == (3, 5) and t.is_contiguous() and t.data_ptr() % PAGE == 0
