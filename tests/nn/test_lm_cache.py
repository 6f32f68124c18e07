"""The LM's caches (nn.lm_cache): built from sizes, holding the key/value heads only, giving
each forward its positions explicitly."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from decoderkit.base.errors import UsageError
from decoderkit.nn.lm.model import DecoderOnlyLM, LMConfig, lm_preset
from decoderkit.nn.lm_cache import CacheShape, LMCache, RowsCache

LLAMA = dataclasses.replace(lm_preset("llama"), vocab_size=50, n_layers=2, d_model=36,
                            n_heads=9, n_kv_heads=None, d_ff=40, max_len=32)


def cache_bytes(cache) -> int:
    tensors = [t for layer in cache.layers for t in (layer.keys, layer.values)]
    return sum(t.numel() * t.element_size() for t in tensors)


def test_three_key_value_heads_cache_a_third_of_nine():
    full = DecoderOnlyLM(LLAMA).new_cache(4, 32)
    grouped = DecoderOnlyLM(dataclasses.replace(LLAMA, n_kv_heads=3)).new_cache(4, 32)
    assert cache_bytes(grouped) * 3 == cache_bytes(full) > 0
    assert grouped.layers[0].keys.shape == (4, 3, 32, 4)
    rows = RowsCache(dataclasses.replace(LLAMA, n_kv_heads=3).cache_shape(), torch.float32, "cpu")
    rows.slot(0)
    assert rows.layers[0].groups[0].keys.shape[1] == 3


def test_caches_are_built_from_sizes():
    cache = LMCache(CacheShape(n_layers=3, n_kv_heads=2, head_dim=8, context=16), 2, 10,
                    torch.float64, "cpu")
    assert len(cache.layers) == 3 and cache.layers[0].keys.shape == (2, 2, 10, 8)
    assert LLAMA.cache_shape() == CacheShape(2, 9, 4, 32)


def test_prepare_gives_each_left_padded_row_its_own_positions():
    cache = LMCache(CacheShape(1, 1, 2, 8), 2, 8, torch.float32, "cpu",
                    start=torch.tensor([0, 3]))
    positions, mask = cache.prepare(torch.zeros(2, 5, dtype=torch.long))
    assert positions.tolist() == [[0, 1, 2, 3, 4], [0, 0, 0, 0, 1]]
    assert mask.shape == (2, 5, 5) and not mask[1, :, :3].any() and mask[1, 4, 3:].all()
    cache.layers[0].length = 5  # five positions cached
    positions, mask = cache.prepare(torch.zeros(2, 1, dtype=torch.long))
    assert positions.tolist() == [[5], [2]] and mask[1, 0].tolist() == [False] * 3 + [True] * 3
    with pytest.raises(UsageError, match="9 positions exceed the cache's 8"):
        cache.prepare(torch.zeros(2, 4, dtype=torch.long))


def test_rows_of_different_lengths_step_at_their_own_positions():
    model = DecoderOnlyLM(LMConfig(vocab_size=20, n_layers=1, d_model=8, n_heads=2, d_ff=8,
                                   max_len=16, dropout=0.0, positions="rope", norm="rms"))
    rows = RowsCache(model.config.cache_shape(), torch.float32, "cpu")
    for i, n in enumerate([5, 2, 9]):
        cache = rows.slot(i)
        model.features(torch.zeros(1, n, dtype=torch.long), cache)
        rows.filled(i, cache)
    positions, mask = rows.prepare(torch.zeros(3, 1, dtype=torch.long))
    assert positions.tolist() == [[5], [2], [9]] and mask is None
    assert rows.lengths == [6, 3, 10]
