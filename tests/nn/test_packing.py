"""Prepacked linears agree with the exact ``F.linear`` path, and decoding is unchanged."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from decoderkit import make_model
from decoderkit.generation.seq2seq.decoding import greedy_decode
from decoderkit.nn.packing import (
    MKL_ROWS,
    PackedLinear,
    mkl_packing_available,
    packing_available,
    prepack,
)
from decoderkit.generation.seq2seq.search import beam_search

pytestmark = pytest.mark.skipif(not packing_available(), reason="no oneDNN prepacked linear")


@pytest.mark.parametrize("shape", [(2, 24), (5, 24), (3, 1, 24), (2, 7, 24), (300, 24)])
@pytest.mark.parametrize("bias", [True, False])
def test_packed_linear_agrees_with_f_linear(shape, bias):
    torch.manual_seed(0)
    linear = nn.Linear(24, 40, bias=bias)
    packed = PackedLinear.from_linear(linear)
    x = torch.randn(shape)
    with torch.inference_mode():
        torch.testing.assert_close(packed(x), linear(x), atol=1e-5, rtol=1e-5)
        assert packed._dnn is not None  # a first call: oneDNN's kernel, not the fallback
        torch.testing.assert_close(packed(x), linear(x), atol=1e-5, rtol=1e-5)
    rows = x.numel() // 24
    if mkl_packing_available() and rows <= MKL_ROWS:  # the same rows again: MKL's kernel
        assert packed._mkl is not None and packed._mkl_rows == rows
    else:
        assert packed._mkl is None


@pytest.mark.parametrize("shape", [(1, 24), (1, 1, 24), (24,)])
def test_a_single_row_takes_the_exact_gemv(shape):
    linear = nn.Linear(24, 40)
    packed, x = PackedLinear.from_linear(linear), torch.randn(shape)
    with torch.inference_mode():
        for _ in range(2):  # the second call would pack if a single row were packed
            assert torch.equal(packed(x), nn.functional.linear(x, linear.weight, linear.bias))
    assert packed._dnn is None and packed._mkl is None


@pytest.mark.skipif(not mkl_packing_available(), reason="no MKL packed linear")
def test_mkl_packing_follows_the_row_count_and_weight_updates():
    torch.manual_seed(3)
    linear = nn.Linear(24, 40)
    packed = PackedLinear.from_linear(linear)
    with torch.inference_mode():
        for rows in (4, 4, 4, 6, 6, 4, 4):  # a decoding loop whose batch size changes
            x = torch.randn(rows, 24)
            torch.testing.assert_close(packed(x), linear(x), atol=1e-5, rtol=1e-5)
        assert packed._mkl_rows == 4 and packed._mkl is not None
        linear.weight.mul_(-1.0)  # an in-place update drops the stale copies
        x = torch.randn(4, 24)
        torch.testing.assert_close(packed(x), linear(x), atol=1e-5, rtol=1e-5)
    for t in range(2, 7):  # a prefix re-run each step: rows change every call, no MKL pack
        with torch.inference_mode():
            packed(torch.randn(t, 24))
        assert packed._mkl is None


def test_training_uses_the_exact_path_and_weight_updates_are_repacked():
    torch.manual_seed(1)
    linear = nn.Linear(8, 6)
    packed = PackedLinear.from_linear(linear)
    assert packed.weight is linear.weight  # shared, so the state dict is unchanged
    x = torch.randn(4, 8)
    packed(x).sum().backward()  # grad enabled: F.linear, gradients flow
    assert packed._dnn is None and packed._mkl is None and linear.weight.grad is not None
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
    assert torch.equal(one_a.tokens, one_b.tokens)  # batch 1: single-row steps
    for sa, sb in zip(one_a.steps, one_b.steps, strict=True):
        torch.testing.assert_close(sa.top_logprobs, sb.top_logprobs, atol=1e-5, rtol=0)
    assert torch.equal(beam_search(model, src, None, beam_size=3, max_len=10).tokens,
                       beam_search(packed, src, None, beam_size=3, max_len=10).tokens)
