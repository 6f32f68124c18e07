"""Prepacked linears agree with the exact ``F.linear`` path, and decoding is unchanged."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from decoderkit import make_model
from decoderkit.decoding import greedy_decode
from decoderkit.packing import PackedLinear, packing_available, prepack
from decoderkit.search import beam_search

pytestmark = pytest.mark.skipif(not packing_available(), reason="no oneDNN prepacked linear")


@pytest.mark.parametrize("shape", [(2, 24), (5, 24), (3, 1, 24), (2, 7, 24)])
@pytest.mark.parametrize("bias", [True, False])
def test_packed_linear_agrees_with_f_linear(shape, bias):
    torch.manual_seed(0)
    linear = nn.Linear(24, 40, bias=bias)
    packed = PackedLinear.from_linear(linear)
    x = torch.randn(shape)
    with torch.inference_mode():
        torch.testing.assert_close(packed(x), linear(x), atol=1e-5, rtol=1e-5)
        assert packed._packed is not None  # the packed kernel ran, not the fallback


@pytest.mark.parametrize("bias", [True, False])
def test_a_single_row_of_a_wide_layer_uses_the_transposed_copy(bias):
    torch.manual_seed(3)
    linear = nn.Linear(24, 40, bias=bias)  # out > in
    packed, x = PackedLinear.from_linear(linear), torch.randn(1, 1, 24)
    with torch.inference_mode():
        y = packed(x)
    assert y.shape == (1, 1, 40)
    torch.testing.assert_close(y, nn.functional.linear(x, linear.weight, linear.bias),
                               atol=1e-5, rtol=1e-5)
    assert packed._packed is None and torch.equal(packed._transposed, linear.weight.t())
    with torch.no_grad():
        linear.weight.mul_(-1.0)  # an in-place update drops the stale copy
        torch.testing.assert_close(packed(x[0]), nn.functional.linear(x[0], linear.weight,
                                                                     linear.bias),
                                   atol=1e-5, rtol=1e-5)


def test_a_single_row_of_a_narrow_layer_takes_the_exact_path():
    linear = nn.Linear(40, 24)  # out <= in
    packed, x = PackedLinear.from_linear(linear), torch.randn(1, 1, 40)
    with torch.inference_mode():
        assert torch.equal(packed(x), nn.functional.linear(x, linear.weight, linear.bias))
    assert packed._packed is None and packed._transposed is None


def test_training_uses_the_exact_path_and_weight_updates_are_repacked():
    torch.manual_seed(1)
    linear = nn.Linear(8, 6)
    packed = PackedLinear.from_linear(linear)
    assert packed.weight is linear.weight  # shared, so the state dict is unchanged
    x = torch.randn(4, 8)
    packed(x).sum().backward()  # grad enabled: F.linear, gradients flow
    assert packed._packed is None and linear.weight.grad is not None
    with torch.no_grad():
        before = packed(x)
        linear.weight.mul_(2.0)  # an in-place update (as an optimiser step)
        after = packed(x)
    torch.testing.assert_close(after, nn.functional.linear(x, linear.weight, linear.bias),
                               atol=1e-5, rtol=1e-5)
    assert not torch.allclose(before, after)


def test_prepacked_model_decodes_the_same():
    torch.manual_seed(2)
    model = make_model(13, 13, N=2, d_model=32, d_ff=64, h=4, dropout=0.0).eval()
    packed = prepack(copy.deepcopy(model))
    n_linear = 2 * (4 + 6) + 1  # per encoder layer 4, per decoder layer 6, the generator
    assert sum(isinstance(m, PackedLinear) for m in packed.modules()) == n_linear
    assert packed.state_dict().keys() == model.state_dict().keys()
    src = torch.randint(3, 13, (3, 6))
    a = greedy_decode(model, src, None, max_len=10, explain=5)
    b = greedy_decode(packed, src, None, max_len=10, explain=5)
    assert torch.equal(a.tokens, b.tokens)
    for sa, sb in zip(a.steps, b.steps, strict=True):
        torch.testing.assert_close(sa.top_logprobs, sb.top_logprobs, atol=1e-5, rtol=0)
    one_a, one_b = (greedy_decode(m, src[:1], None, max_len=10, explain=5) for m in (model, packed))
    assert torch.equal(one_a.tokens, one_b.tokens)  # batch 1: the single-row path
    for sa, sb in zip(one_a.steps, one_b.steps, strict=True):
        torch.testing.assert_close(sa.top_logprobs, sb.top_logprobs, atol=1e-5, rtol=0)
    assert torch.equal(beam_search(model, src, None, beam_size=3, max_len=10).tokens,
                       beam_search(packed, src, None, beam_size=3, max_len=10).tokens)
