"""Week 3's re-derivation at its reference settings is decoderkit's DecoderOnlyLM on the same
weights; each GPT mistake really changes the output."""

import pytest
import torch

from decoderkit.grade.reference import blocks, gpt
from decoderkit.grade.seeds.week3.modules import CHANGES


def _weights(seed=0, V=11, L=9, d=8, h=2, n=2):
    g = torch.Generator().manual_seed(seed)

    def r(*shape, scale=1.0):
        return scale * torch.randn(*shape, generator=g, dtype=torch.float64)

    def norm():
        return 1 + 0.3 * r(d), 0.3 * r(d)
    layers = tuple(gpt.BlockW(norm(), blocks.Projections(
        *(t for _ in range(4) for t in (r(d, d, scale=d ** -0.5), r(d, scale=0.3))), h), norm(),
        r(d, 4 * d, scale=d ** -0.5), r(4 * d), r(4 * d, d, scale=0.2), r(d)) for _ in range(n))
    return gpt.GPTW(r(V, d), r(L, d), layers, norm(), r(V, d))


@pytest.mark.parametrize("gelu", ["erf", "tanh"])
def test_reference_settings_are_decoder_only_lm(gelu):
    w = _weights()
    ids = torch.randint(0, 11, (2, 9), generator=torch.Generator().manual_seed(1))
    ours = gpt.gpt_logits(ids, w, gpt.GSpec(gelu=gelu))
    with torch.no_grad():
        lm = gpt.reference(w, gelu)(ids)
    torch.testing.assert_close(ours, lm, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("mistake", sorted(CHANGES))
def test_each_gpt_mistake_changes_the_logits(mistake):
    w = _weights(2)
    ids = torch.randint(0, 11, (2, 9), generator=torch.Generator().manual_seed(3))
    base = gpt.GSpec(gelu="tanh" if mistake == "gelu_exact_for_tanh" else "erf")
    ref = gpt.gpt_logits(ids, w, base)
    out = gpt.gpt_logits(ids, w, base.but(**CHANGES[mistake]))
    assert not torch.allclose(ref, out, atol=1e-6, equal_nan=True)
