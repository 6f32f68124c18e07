"""nn.cache: the one key/value cache, built from sizes and written at the caller's positions.
The rowwise kernel: a row's attention is the same bit for bit alone and among longer and
shorter companions, in any slot and any group (the property continuous batching's guarantee
rests on), and equals the reference attention over the row's own keys; a row started from
keys and values loaded from elsewhere (``load_prefix``) steps as the prefilled row does, bit
for bit. The standard kernel: a left-padded row sees only its own positions."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from decoderkit.base.errors import UsageError
from decoderkit.base.memory import PAGE, page_aligned
from decoderkit.nn.attend import PREFILL_CHUNK, ROWS_CHUNK, SMALL_MATMUL, attention
from decoderkit.nn.cache import ROWS_GROUP, KVCache
from decoderkit.nn.lm.model import DecoderOnlyLM, LMConfig
from decoderkit.nn.lm.presets import lm_preset

LLAMA = dataclasses.replace(lm_preset("llama"), vocab_size=50, n_layers=2, d_model=36,
                            n_heads=9, n_kv_heads=None, d_ff=40, max_len=32)


def filled(rows: list[tuple[torch.Tensor, torch.Tensor]], h: int, L: int, d_k: int):
    """A one-layer rowwise KVCache whose slot i holds rows[i]'s keys and values (1, h, n_i,
    d_k)."""
    cache = KVCache(1, h, L, d_k, rowwise=True, dtype=torch.float32, device="cpu")
    for i, (k, v) in enumerate(rows):
        cache.load_prefix(i, k, v, k.size(2))
    return cache


def step(cache: KVCache, lengths: list[int], q, k, v) -> torch.Tensor:
    """One step of the first len(lengths) slots: q, k, v (B, h, 1, d_k) -> (B, h, 1, d_k)."""
    at = cache.at(torch.tensor(lengths)[:, None], window=max(lengths) + 1)
    return cache.attend(0, q, k, v, at)[0]


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
    keys, values = cache.keys[0][0], cache.values[0][0]
    assert keys[0, :, :5].eq(5).all() and values[0, :, :5].eq(-5).all()
    assert keys[1, :, :5].eq(5).all()  # the source is left as it was


def test_the_window_is_whole_chunks_past_the_small_matmul_loop_and_within_the_capacity():
    def cache(h, L, d_k):
        return KVCache(1, h, L, d_k, rowwise=True, dtype=torch.float32, device="cpu")

    assert [cache(2, 96, 8).step_window(n) for n in (1, 50, 64, 65, 96)] == [64, 64, 64, 80, 96]
    assert all(w % ROWS_CHUNK == 0 and w * 8 >= SMALL_MATMUL for w in (64, 80, 96))
    assert {cache(2, 48, 8).step_window(n) for n in (1, 17, 48)} == {48}  # the capacity
    assert cache(12, 1024, 64).step_window(17) == 32
    assert cache(2, 40, 8).capacity == 48  # whole chunks: every window fits


def test_group_buffers_start_at_a_page_boundary():
    cache = KVCache(2, 12, 1024, 64, rowwise=True, dtype=torch.float32, device="cpu")
    assert cache.keys[0].data_ptr() % PAGE == 0 and cache.values[0].data_ptr() % PAGE == 0
    assert cache.keys[0].shape == (2, ROWS_GROUP, 12, 1024, 64)
    cache.reserve(ROWS_GROUP)  # the second group
    assert len(cache.keys) == 2 and cache.keys[1].data_ptr() % PAGE == 0
    t = page_aligned((3, 5), torch.float64, "cpu")
    assert t.shape == (3, 5) and t.is_contiguous() and t.data_ptr() % PAGE == 0


def test_three_key_value_heads_cache_a_third_of_nine():
    def size(cache: KVCache) -> int:
        return sum(t.numel() * t.element_size() for t in (*cache.keys, *cache.values))

    full = DecoderOnlyLM(LLAMA).new_cache(4, 32)
    grouped = DecoderOnlyLM(dataclasses.replace(LLAMA, n_kv_heads=3)).new_cache(4, 32)
    assert size(grouped) * 3 == size(full) > 0
    assert grouped.keys[0].shape == (2, 4, 3, 33, 4)  # the scratch position past 32


def test_the_mask_is_derived_from_each_rows_positions():
    cache = KVCache(1, 1, 8, 2, slots=2, dtype=torch.float32, device="cpu")
    at = cache.at(torch.tensor([[0, 1, 2, 3, 4], [-1, -1, -1, 0, 1]]))  # row 1 left-padded
    assert at.window == 5 and at.index[1].tolist() == [8, 8, 8, 0, 1]  # padding: the scratch
    assert not at.mask[1, :3].any() and at.mask[1, 4].tolist() == [True] * 2 + [False] * 3
    at = cache.at(torch.tensor([[5], [2]]))
    assert at.mask[:, 0].tolist() == [[True] * 6, [True] * 3 + [False] * 3]
    assert cache.at(3).mask is None  # every row at 3 sees 0..3: no mask to apply
    with pytest.raises(UsageError, match="9 positions exceed the cache's 8"):
        cache.at(5, 4)


def lm(max_len: int = 40) -> DecoderOnlyLM:
    torch.manual_seed(0)
    return DecoderOnlyLM(LMConfig(vocab_size=20, n_layers=2, d_model=8, n_heads=2, d_ff=8,
                                  max_len=max_len, dropout=0.0, positions="rope",
                                  norm="rms")).eval()


def test_a_row_loaded_from_a_prefix_steps_as_the_prefilled_row_bit_for_bit():
    """Slot 0 prefilled with a prompt; its keys and values read out and loaded into slot 1 of
    the same cache: a step of both gives the same hidden states bit for bit; loaded into
    another cache's slot 0, its step alone gives what the prefilled row's step alone gives."""
    model, prompt = lm(), [3, 1, 4, 1, 5, 9, 2]
    n, caches = len(prompt), [lm().new_cache(1, 40, rowwise=True) for _ in range(3)]
    prefilled, together, other = caches
    with torch.no_grad():
        for cache in (prefilled, together):
            model.features(torch.tensor([prompt]), cache, cache.packed([0], [n]))
        keys, values = prefilled.read_prefix(0, n)
        assert keys.shape == (2, 2, n, 4)
        together.load_prefix(1, keys, values, n)
        other.load_prefix(0, keys, values, n)
        both = model.features(torch.tensor([[6], [6]]), together,
                              together.at(torch.tensor([[n], [n]])))
        alone = [model.features(torch.tensor([[6]]), c, c.at(torch.tensor([[n]])))
                 for c in (prefilled, other)]
    assert torch.equal(both[0], both[1]) and torch.equal(alone[0], alone[1])


def test_a_prompt_prefilled_after_a_loaded_prefix_equals_it_prefilled_whole():
    """Prefix reuse: a row's first 5 positions loaded, the rest of its prompt prefilled at
    positions 5.. (``packed(starts=...)``), then a step: the whole prompt's own prefill and
    step (float64)."""
    model, prompt = lm().double(), [3, 1, 4, 1, 5, 9, 2, 6, 5]
    whole = model.new_cache(1, 40, rowwise=True)
    reused = model.new_cache(1, 40, rowwise=True)
    with torch.no_grad():
        h = model.features(torch.tensor([prompt]), whole, whole.packed([0], [len(prompt)]))
        reused.load_prefix(0, *whole.read_prefix(0, 5), 5)
        rest = model.features(torch.tensor([prompt[5:]]), reused,
                              reused.packed([0], [len(prompt) - 5], starts=[5]))
        at = torch.tensor([[len(prompt)]])
        steps = [model.features(torch.tensor([[7]]), c, c.at(at)) for c in (whole, reused)]
    assert (rest[0] - h[0, 5:]).abs().max() <= 1e-12
    assert (steps[0] - steps[1]).abs().max() <= 1e-12


def test_load_prefix_checks_its_sizes():
    cache = KVCache(2, 3, 16, 4, rowwise=True, dtype=torch.float32, device="cpu")
    with pytest.raises(UsageError, match=r"load_prefix takes keys and values \(N=2, h=3"):
        cache.load_prefix(0, torch.zeros(1, 3, 5, 4), torch.zeros(1, 3, 5, 4), 5)


def test_a_packed_prefills_chunk_masks_are_made_once_for_every_layer(monkeypatch):
    """Two prompts (2.5 chunks from 0, 1.25 after a loaded prefix of one chunk) prefilled by
    a 2-layer model: their 3 + 2 query chunks' masks are made once (``At.chunks``), not once
    a layer, and equal ``visible`` of each chunk's positions; one-query chunks take none."""
    import decoderkit.nn.cache as cache_module

    made, C = [], PREFILL_CHUNK
    monkeypatch.setattr(cache_module, "visible", lambda p, w: made.append(w) or
                        torch.arange(w) <= p[..., None])
    model = lm(4 * C)
    cache = model.new_cache(1, 4 * C, rowwise=True)
    with torch.no_grad():
        cache.load_prefix(1, *cache.read_prefix(0, C), C)
        at = cache.packed([0, 1], [5 * C // 2, 5 * C // 4], starts=[0, C])
        model.features(torch.randint(20, (1, 15 * C // 4)), cache, at)
    assert made == [C, 2 * C, 5 * C // 2, 2 * C, 9 * C // 4]
    assert [[(a, b) for a, b, _ in chunks] for chunks in at.chunks] == [
        [(0, C), (C, 2 * C), (2 * C, 5 * C // 2)], [(C, 2 * C), (2 * C, 9 * C // 4)]]
    last = at.chunks[1][1]
    assert torch.equal(last[2], (torch.arange(9 * C // 4)
                                 <= torch.arange(2 * C, 9 * C // 4)[:, None])[None])
    assert cache.packed([2], [1], starts=[0]).chunks == (((0, 1, None),),)
