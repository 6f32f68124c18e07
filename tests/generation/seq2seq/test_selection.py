"""top_k: the k largest of each row, checked against a full sort of the row."""

from __future__ import annotations

import pytest
import torch

from decoderkit.generation.seq2seq.selection import CHUNK, MIN_CHUNKS, top_k


def check(x: torch.Tensor, k: int) -> None:
    """Values: the sorted row's first k; indices: distinct, in the row, holding those values."""
    values, index = top_k(x, k)
    assert torch.equal(values, x.sort(dim=-1, descending=True).values[:, :k])
    assert index.dtype == torch.long and bool(((index >= 0) & (index < x.size(1))).all())
    assert torch.equal(x.gather(1, index), values)
    assert all(len(set(row)) == k for row in index.tolist())


@pytest.mark.parametrize("k", [1, 4, 8])
@pytest.mark.parametrize("n", [MIN_CHUNKS * 8 * CHUNK, 16004, 16004 + CHUNK - 1])
def test_long_rows_give_the_largest(n, k):
    """The chunked path: rows of beam 4 x 4,001 pieces and others, n % CHUNK of each kind."""
    g = torch.Generator().manual_seed(n + k)
    x = torch.randn(6, n, generator=g).log_softmax(-1)
    x[:, ::7] = float("-inf")  # banned pieces, finished hypotheses
    x[1] = x[1].round(decimals=1)  # many equal values
    x[2, -3:] = 50.0  # the largest among the elements after the last whole chunk
    x[3, :CHUNK] = 40.0  # all in one chunk
    check(x, k)


def test_a_row_with_fewer_finite_values_than_k():
    x = torch.full((2, 16004), float("-inf"))
    x[0, 5], x[1, 16003] = 1.0, 2.0
    check(x, 4)


def test_short_rows_are_topk_itself():
    x = torch.randn(3, MIN_CHUNKS * 4 * CHUNK - 1)
    values, index = top_k(x, 4)
    expected = x.topk(4, dim=-1)
    assert torch.equal(values, expected.values) and torch.equal(index, expected.indices)
