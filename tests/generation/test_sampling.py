"""generation.sampling: top-k / top-p filtering against NumPy, the inverse-transform draw and its
one uniform number per row."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from decoderkit.generation import sampling
from decoderkit.generation.sampling import draw, filter_logits



@pytest.mark.parametrize("top_k,top_p", [(0, 0.5), (3, 1.0), (4, 0.8), (0, 0.999), (1, 0.3)])
def test_filter_logits_against_numpy(top_k, top_p):
    logits = torch.randn(5, 12, generator=torch.Generator().manual_seed(top_k))
    got = filter_logits(logits.double(), top_k, top_p).numpy()
    for row, z in zip(got, logits.numpy(), strict=True):
        np.testing.assert_array_equal(np.isinf(row), np.isinf(np_filter(z, top_k, top_p)))


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.float64])
@pytest.mark.parametrize("u,expected", [(0.0, 0), (1.0 - 2.0 ** -53, 3), (0.5, 3)])
def test_the_uniforms_ends_pick_the_first_and_last_kept_tokens(dtype, u, expected, monkeypatch):
    """Inverse transform sampling at u = 0 takes the first token of positive probability, at
    the largest u < 1 the last one (u * total may round up to the total: the target stays
    below it), never a filtered or banned token (p = 0: its cdf equals the one before)."""
    monkeypatch.setattr(sampling, "uniforms", lambda gens, n, device: torch.full(
        (n,), u, dtype=torch.float64))
    logits = torch.tensor([[0.0, 1.0, float("-inf"), 2.0, -9.0]], dtype=dtype)
    # top_k=3 drops token 4; token 2 is banned
    assert draw(logits, [torch.Generator().manual_seed(0)], 1.0, 3, 1.0).tolist() == [expected]


def test_an_unfiltered_draw_at_temperature_1_is_the_filtered_paths():
    """draw's shortcut (softmax of the raw logits, which shifts by their max itself) gives the
    probabilities of the general path (tempered, filtered: top_k = V keeps all) bit for bit,
    so the same tokens for the same generators."""
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(64, 1000, generator=g) * 4
    logits[:, :3] = -100.0
    assert torch.equal(logits.softmax(-1), sampling.tempered(logits, 1.0).softmax(-1))

    def tokens(top_k: int) -> list[int]:
        gens = [torch.Generator().manual_seed(s) for s in range(64)]
        return draw(logits, gens, 1.0, top_k, 1.0).tolist()

    assert tokens(0) == tokens(1000)


def test_one_uniform_per_row_from_the_rows_own_generator():
    """Row i's number comes from generator i alone, one number per row (a row's draw does
    not depend on the others'); a single generator serves the whole batch in order."""
    gens = [torch.Generator().manual_seed(s) for s in (5, 6, 7)]
    alone = [float(torch.rand(1, dtype=torch.float64, generator=torch.Generator().manual_seed(s)))
             for s in (5, 6, 7)]
    assert sampling.uniforms(gens, 3, torch.device("cpu")).tolist() == alone
    one = torch.Generator().manual_seed(5)
    assert sampling.uniforms([one], 3, torch.device("cpu")).tolist() == torch.rand(
        3, dtype=torch.float64, generator=torch.Generator().manual_seed(5)).tolist()
    with pytest.raises(ValueError, match="2 generators for 3 rows"):
        sampling.uniforms(gens[:2], 3, torch.device("cpu"))


def np_filter(z, top_k, top_p):
    """Reference top-k then top-p filter on one row, by sorting in NumPy."""
    z = z.astype(np.float64).copy()
    order = np.argsort(-z, kind="stable")
    if top_k:
        z[order[top_k:]] = -np.inf
    p = np.exp(z - z.max())
    p /= p.sum()
    mass = 0.0
    for idx in order:
        if mass >= top_p:
            z[idx] = -np.inf
        mass += p[idx]
    return z
