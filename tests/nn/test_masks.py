"""Masks: one convention (True = may attend), converters at the edges, clear errors."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st

from conftest import PROPERTY
from decoderkit import (
    causal_mask,
    from_torch_mask,
    padding_mask,
    target_mask,
    to_additive,
    to_torch_mask,
)
from decoderkit.nn.masks import broadcasts_to, check_mask


@pytest.mark.parametrize("size", [1, 2, 4, 7])
def test_causal_mask_is_lower_triangle(size):
    mask = causal_mask(size)
    assert mask.dtype == torch.bool and mask.shape == (size, size)
    np.testing.assert_array_equal(mask.numpy(), np.tril(np.ones((size, size), dtype=bool)))


def test_causal_mask_seed_tables():
    """Seed 000 prints the blocked set (1 = blocked) for T = 4; seed 001's subsequent_mask is
    triu(ones, diagonal=1) == 0 -- the diagonal is visible, the strict upper triangle is not."""
    blocked = [[0, 1, 1, 1], [0, 0, 1, 1], [0, 0, 0, 1], [0, 0, 0, 0]]
    assert to_torch_mask(causal_mask(4)).int().tolist() == blocked
    assert torch.equal(causal_mask(4), torch.triu(torch.ones(4, 4), diagonal=1) == 0)
    assert causal_mask(4)[-1].all()  # the last query sees every position


def test_causal_mask_device(device):
    assert causal_mask(3, device=device).device.type == device


@pytest.mark.parametrize("size", [0, -2, 2.0, True, "3"])
def test_causal_mask_bad_size(size):
    with pytest.raises(ValueError, match="size must be an integer >= 1"):
        causal_mask(size)


def test_padding_mask_with_pad_id_two():
    """Seed 001: two real tokens in four slots, pad id 2 (pad need not be 0)."""
    ids = torch.tensor([[7, 9, 2, 2], [4, 2, 2, 2], [0, 1, 3, 5]])
    mask = padding_mask(ids, pad_id=2)
    assert mask.shape == (3, 1, 4) and mask.dtype == torch.bool
    assert mask[:, 0].tolist() == [[True, True, False, False], [True, False, False, False],
                                   [True, True, True, True]]


def test_target_mask_is_padding_and_causal():
    ids = torch.tensor([[5, 6, 7, 0, 0], [8, 9, 0, 0, 0]])
    mask = target_mask(ids, pad_id=0)
    assert mask.shape == (2, 5, 5)
    expected = np.tril(np.ones((5, 5), dtype=bool))[None] & (ids.numpy() != 0)[:, None, :]
    np.testing.assert_array_equal(mask.numpy(), expected)


@PROPERTY
@given(st.lists(st.lists(st.integers(0, 3), min_size=4, max_size=4), min_size=1, max_size=3),
       st.integers(0, 3))
def test_target_mask_definition(rows, pad_id):
    ids = torch.tensor(rows)
    mask = target_mask(ids, pad_id)
    for b, row in enumerate(rows):
        for i in range(4):
            for j in range(4):
                assert bool(mask[b, i, j]) == (j <= i and (j == 0 or row[j] != pad_id))


def test_target_mask_keeps_a_pad_start_token_visible():
    """Marian starts decoding with the pad id: position 0 is the start, never padding."""
    pad = 9
    ids = torch.tensor([[pad, 4, 5, pad], [pad, 6, pad, pad]])  # [start, y1.., padding]
    mask = target_mask(ids, pad)
    assert mask[:, :, 0].all()  # every query sees the start token
    assert not mask[0, 3, 3] and not mask[1, 2, 2] and not mask[1, 3, 2]  # the padding is hidden
    assert torch.equal(mask[:, :, 1:], target_mask(ids, pad)[:, :, 1:])


def test_torch_convention_round_trip():
    mask = target_mask(torch.tensor([[3, 4, 0], [5, 0, 0]]), 0)
    torch_mask = to_torch_mask(mask)
    assert torch.equal(torch_mask, ~mask)
    assert torch.equal(from_torch_mask(torch_mask), mask)


def test_reads_torch_square_subsequent_mask():
    """nn.Transformer's additive causal mask (0 / -inf) is our causal mask, read at the edge."""
    torch_mask = torch.nn.Transformer.generate_square_subsequent_mask(5)
    assert torch.equal(from_torch_mask(torch_mask), causal_mask(5))
    assert torch.equal(to_additive(causal_mask(5)), torch_mask)


def test_additive_masks():
    mask = causal_mask(3)
    additive = to_additive(mask, torch.float64)
    assert additive.dtype == torch.float64
    assert (additive[mask] == 0).all() and (additive[~mask] == float("-inf")).all()
    assert torch.equal(from_torch_mask(additive), mask)
    # a finite large negative value counts as visible: only literal -inf blocks
    assert from_torch_mask(torch.tensor([0.0, -1e9, float("-inf")])).tolist() == [True, True, False]


def test_additive_and_bool_masks_agree_in_sdpa():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 4, 5, generator=g, dtype=torch.float64) for _ in range(3))
    mask = target_mask(torch.tensor([[1, 2, 3, 0], [4, 5, 0, 0]]), 0).unsqueeze(1)
    a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    b = F.scaled_dot_product_attention(q, k, v, attn_mask=to_additive(mask, torch.float64))
    torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("shape", [(4, 4), (1, 4, 4), (2, 4, 4), (2, 1, 4), (4,), (1, 1, 1)])
def test_check_mask_accepts_broadcastable(shape):
    check_mask(torch.ones(shape, dtype=torch.bool), (2, 4, 4))


@pytest.mark.parametrize("shape", [(4, 5), (3, 4, 4), (2, 2, 4, 4), (5,)])
def test_check_mask_rejects_shape(shape):
    with pytest.raises(ValueError, match=r"mask of shape .* does not broadcast to \(2, 4, 4\)"):
        check_mask(torch.ones(shape, dtype=torch.bool), (2, 4, 4))


def test_broadcasts_to_is_torchs_broadcast():
    """Every pair of shapes of up to 3 dimensions of sizes 0-3: broadcasts_to agrees with
    torch.broadcast_shapes giving exactly the second."""
    sizes = [0, 1, 2, 3]
    shapes = [s for n in range(4) for s in itertools.product(sizes, repeat=n)]
    for small, shape in itertools.product(shapes, repeat=2):
        try:
            expected = torch.broadcast_shapes(small, shape) == shape
        except RuntimeError:
            expected = False
        assert broadcasts_to(small, shape) == expected, (small, shape)


@pytest.mark.parametrize("fn", [to_torch_mask, to_additive, lambda m: check_mask(m, (3, 3))])
@pytest.mark.parametrize("dtype", [torch.int64, torch.uint8, torch.float32])
def test_bool_mask_required(fn, dtype):
    with pytest.raises(TypeError, match=f"mask must be a bool tensor.*got dtype {dtype}"):
        fn(torch.ones(3, 3, dtype=dtype))


def test_not_a_tensor():
    for fn in (to_torch_mask, to_additive, from_torch_mask):
        with pytest.raises(TypeError, match="mask must be a torch.Tensor, got list"):
            fn([[True]])
    with pytest.raises(TypeError, match="must be bool or floating point, got dtype torch.int64"):
        from_torch_mask(torch.ones(2, 2, dtype=torch.int64))


@pytest.mark.parametrize("fn", [padding_mask, target_mask])
def test_bad_ids(fn):
    with pytest.raises(TypeError, match="ids must hold integer token ids, got dtype torch.float32"):
        fn(torch.zeros(2, 3), 0)
    with pytest.raises(TypeError, match="ids must hold integer token ids, got dtype torch.bool"):
        fn(torch.zeros(2, 3, dtype=torch.bool), 0)
    with pytest.raises(ValueError, match=r"ids must have shape \(B, L\), got shape \(3,\)"):
        fn(torch.zeros(3, dtype=torch.long), 0)
    with pytest.raises(TypeError, match="ids must be a torch.Tensor of token ids, got list"):
        fn([[1, 2]], 0)
    with pytest.raises(TypeError, match="pad_id must be an int, got float"):
        fn(torch.zeros(2, 3, dtype=torch.long), 0.0)
