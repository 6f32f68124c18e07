"""attention() and MultiHeadAttention against NumPy, F.scaled_dot_product_attention and
nn.MultiheadAttention, plus the seeds' numeric examples."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st
from torch import nn

from conftest import F64, PROPERTY, as_np, copy_attention, np_attention, randn
from decoderkit import (
    MultiHeadAttention,
    attention,
    causal_mask,
    padding_mask,
    target_mask,
    to_torch_mask,
)
from decoderkit.base.errors import UsageError
from decoderkit.nn.cache import KVCache
from decoderkit.nn.cross_cache import CrossKV

pytestmark = pytest.mark.usefixtures("seeded")


# ---- the seeds' numbers ----

def test_seed_masked_row():
    """Seed 000: scores (2, 1, 5, 3), first two keys visible -> (e^2, e, 0, 0) / (e^2 + e)."""
    q = torch.tensor([[1.0]], dtype=torch.float64)
    k = torch.tensor([[2.0], [1.0], [5.0], [3.0]], dtype=torch.float64)  # d_k = 1: scores = k
    out, weights = attention(q, k, torch.eye(4, dtype=torch.float64),
                             torch.tensor([[True, True, False, False]]))
    e = math.e
    expected = [e**2 / (e**2 + e), e / (e**2 + e), 0.0, 0.0]
    torch.testing.assert_close(weights[0], torch.tensor(expected, dtype=torch.float64), **F64)
    assert weights[0, 2:].eq(0).all()  # literal -inf: exactly zero, not merely small
    assert [round(w, 4) for w in weights[0].tolist()] == [0.7311, 0.2689, 0.0, 0.0]
    torch.testing.assert_close(out, weights, **F64)  # values = identity


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_blocked_keys_use_literal_minus_infinity(dtype):
    """A finite sentinel (-1e9, -1e4) loses to a visible score below it; -inf never does."""
    q = torch.tensor([[1.0]], dtype=dtype)
    k = torch.tensor([[-3e9], [0.0]], dtype=dtype)  # the visible key scores -3e9
    _, weights = attention(q, k, k, torch.tensor([[True, False]]))
    assert weights.tolist() == [[1.0, 0.0]]


def test_seed_causal_weights_table():
    """Seed 000 section 7: the 4x4 scores under a causal mask give the printed table."""
    scores = torch.tensor([[1.2, .5, 2.1, -.3], [.2, 1., .8, 1.1], [.4, -.2, 1.4, .7],
                           [.6, .3, -.1, 1.3]], dtype=torch.float64)
    eye = torch.eye(4, dtype=torch.float64)
    _, weights = attention(2.0 * scores, eye, eye, causal_mask(4))  # d_k = 4: / sqrt(4) = / 2
    printed = torch.tensor([[1.0, 0.0, 0.0, 0.0], [0.3100, 0.6900, 0.0, 0.0],
                            [0.2344, 0.1286, 0.6370, 0.0], [0.2352, 0.1743, 0.1168, 0.4737]],
                           dtype=torch.float64)
    torch.testing.assert_close(weights, printed, rtol=0, atol=5e-5)
    assert weights.triu(1).eq(0).all()
    torch.testing.assert_close(weights.sum(-1), torch.ones(4, dtype=torch.float64), **F64)


def seed_004_head(d: int) -> MultiHeadAttention:
    """One head whose Q, K, V projections are seed 004's three bias-free nn.Linear(d, d), drawn
    in its order after torch.manual_seed(42) and its inputs; identity output projection."""
    q, k, v = (nn.Linear(d, d, bias=False) for _ in range(3))
    mha = MultiHeadAttention(d, 1, bias=False)
    with torch.no_grad():
        mha.in_proj.weight.copy_(torch.cat([q.weight, k.weight, v.weight]))
        mha.out_proj.weight.copy_(torch.eye(d))
    return mha


def test_seed_004_masked_self_attention_table():
    """Seed 004's T = 4 trace reproduces to its 4 printed decimals. (Its cross-attention table
    does not come out of its own printed code under this torch, so it is not asserted.)"""
    torch.manual_seed(42)
    x = torch.randn(1, 4, 8)
    _, weights = seed_004_head(8)(x, mask=causal_mask(4), need_weights=True)
    printed = torch.tensor([[1.0, 0.0, 0.0, 0.0], [0.4323, 0.5677, 0.0, 0.0],
                            [0.4099, 0.2935, 0.2966, 0.0], [0.1717, 0.2685, 0.3672, 0.1926]])
    torch.testing.assert_close(weights[0, 0], printed, rtol=0, atol=5e-5)


def test_masking_scores_is_not_zeroing_weights():
    """Seeds 000/004: zeroing future weights after softmax leaves rows that do not sum to 1;
    masking the scores renormalises over the visible keys."""
    scores = randn(4, 4)
    eye = torch.eye(4, dtype=torch.float64)
    _, masked = attention(scores * 2, eye, eye, causal_mask(4))
    zeroed = scores.softmax(-1) * causal_mask(4)
    assert (zeroed.sum(-1)[:-1] < 1 - 1e-3).all()
    torch.testing.assert_close(masked.sum(-1), torch.ones(4, dtype=torch.float64), **F64)


def test_seed_cross_attention_shapes():
    """Seed 000: B=2, T=3 decoder queries, S=5 encoder keys, d=16, h=4 -> weights [2,4,3,5]."""
    mha = MultiHeadAttention(16, 4)
    out, weights = mha(torch.randn(2, 3, 16), torch.randn(2, 5, 16), need_weights=True)
    assert list(weights.shape) == [2, 4, 3, 5] and list(out.shape) == [2, 3, 16]
    # seed 004: T_dec=4, T_enc=6, d_model=8, n_heads=2 -> (B, 2, 4, 6), rows sum to 1
    _, weights = MultiHeadAttention(8, 2)(torch.randn(1, 4, 8), torch.randn(1, 6, 8),
                                          need_weights=True)
    assert weights.shape == (1, 2, 4, 6)
    torch.testing.assert_close(weights.sum(-1), torch.ones(1, 2, 4))


def test_head_split_and_merge():
    """Seed 001: 512 = 8 heads x 64; (B, L, 512) -> (B, 8, L, 64) -> back, head j = slice j."""
    mha = MultiHeadAttention(512, 8)
    assert mha.d_k == 64
    x = torch.randn(2, 5, 512)
    heads = mha.split_heads(x)
    assert heads.shape == (2, 8, 5, 64)
    for j in range(8):
        assert torch.equal(heads[:, j], x[..., 64 * j:64 * (j + 1)])
    assert torch.equal(mha.merge_heads(heads), x)
    q, k, v = mha.split_heads_packed(torch.cat([x, 2 * x, 3 * x], dim=-1))
    assert torch.equal(q, heads) and torch.equal(k, 2 * heads) and torch.equal(v, 3 * heads)


def test_parameter_count():
    d = 12
    assert sum(p.numel() for p in MultiHeadAttention(d, 3).parameters()) == 4 * d * d + 4 * d


@pytest.mark.parametrize("d_model,n_heads", [(10, 3), (8, 3), (512, 7)])
def test_heads_must_divide_width(d_model, n_heads):
    with pytest.raises(ValueError, match=f"d_model={d_model}, n_heads={n_heads}"):
        MultiHeadAttention(d_model, n_heads)


# ---- attention() against NumPy and SDPA ----

def mask_kinds(B=2, T=4, S=4):
    """Every mask kind of the library: (name, mask broadcastable to (B, T, S))."""
    ids = torch.tensor([[5, 6, 7, 0], [8, 9, 0, 0]])[:B, :S]
    kinds = {"none": None, "causal (T,T)": causal_mask(T),
             "causal (1,T,T)": causal_mask(T)[None], "padding (B,1,S)": padding_mask(ids, 0)}
    if S == T:
        kinds["target (B,T,T)"] = target_mask(ids, 0)
    return kinds


@pytest.mark.parametrize("kind", list(mask_kinds()))
def test_attention_matches_numpy_and_sdpa(kind):
    mask = mask_kinds()[kind]
    q, k, v = randn(2, 4, 6, seed=1), randn(2, 4, 6, seed=2), randn(2, 4, 3, seed=3)
    out, weights = attention(q, k, v, mask)
    ref_out, ref_weights = np_attention(as_np(q), as_np(k), as_np(v),
                                        None if mask is None else mask.numpy())
    np.testing.assert_allclose(as_np(weights), ref_weights, **F64)
    np.testing.assert_allclose(as_np(out), ref_out, **F64)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask), **F64)


@PROPERTY
@given(st.integers(1, 3), st.integers(1, 5), st.integers(1, 5), st.integers(1, 6),
       st.integers(0, 2**16))
def test_attention_random_masks_match_numpy(B, T, S, d_k, seed):
    """Any bool mask, including rows with no visible key (-> zero weights and output)."""
    q, k, v = randn(B, T, d_k, seed=seed), randn(B, S, d_k, seed=seed + 1), randn(B, S, 2)
    mask = randn(B, T, S, seed=seed + 2) > 0.0
    out, weights = attention(q, k, v, mask)
    ref_out, ref_weights = np_attention(as_np(q), as_np(k), as_np(v), mask.numpy())
    np.testing.assert_allclose(as_np(weights), ref_weights, **F64)
    np.testing.assert_allclose(as_np(out), ref_out, **F64)


def test_attention_per_head_mask_broadcast():
    """(B, h, T, S) scores with a (B, 1, 1, S) mask, as MultiHeadAttention passes it."""
    q, k, v = randn(2, 3, 4, 5, seed=1), randn(2, 3, 6, 5, seed=2), randn(2, 3, 6, 5, seed=3)
    mask = padding_mask(torch.tensor([[1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 0]]), 0).unsqueeze(1)
    out, weights = attention(q, k, v, mask)
    ref_out, ref_weights = np_attention(as_np(q), as_np(k), as_np(v), mask.numpy())
    np.testing.assert_allclose(as_np(out), ref_out, **F64)
    assert weights[0, :, :, 3:].eq(0).all()


def test_fully_masked_row_gives_zeros_and_finite_gradients():
    q, k, v = (randn(2, 3, 4, seed=s).requires_grad_() for s in (1, 2, 3))
    mask = torch.tensor([[True, True, False], [False, False, False], [True, False, True]])
    out, weights = attention(q, k, v, mask)
    assert weights[:, 1].eq(0).all() and out[:, 1].eq(0).all()
    assert torch.isfinite(out).all() and torch.isfinite(weights).all()
    (out.sum() + weights.square().sum()).backward()
    for t in (q, k, v):
        assert torch.isfinite(t.grad).all()
    assert q.grad[:, 1].eq(0).all()


def test_large_scores_are_stable():
    q = torch.full((1, 2, 4), 1e3)
    k = torch.tensor([[[1e3] * 4, [-1e3] * 4]])
    out, weights = attention(q, k, torch.eye(2)[None])
    assert torch.isfinite(out).all()
    assert weights.tolist() == [[[1.0, 0.0], [1.0, 0.0]]]


@pytest.mark.parametrize("dtype", [torch.int64, torch.float32, torch.uint8])
def test_attention_rejects_non_bool_mask(dtype):
    q = randn(2, 3, 4)
    with pytest.raises(TypeError, match=f"mask must be a bool tensor.*got dtype {dtype}"):
        attention(q, q, q, torch.ones(3, 3, dtype=dtype))
    with pytest.raises(TypeError, match=f"mask must be a bool tensor.*got dtype {dtype}"):
        MultiHeadAttention(4, 2).double()(q, mask=torch.ones(3, 3, dtype=dtype))


def test_mask_shape_errors():
    x = randn(2, 3, 4)
    with pytest.raises(ValueError, match=r"mask of shape \(3, 4\) does not broadcast"):
        attention(x, x, x, torch.ones(3, 4, dtype=torch.bool))
    mha = MultiHeadAttention(4, 2).double()
    with pytest.raises(ValueError, match=r"mask of shape \(2, 1, 5\) does not broadcast to "
                                         r"\(2, 3, 6\)"):
        mha(x, randn(2, 6, 4), mask=torch.ones(2, 1, 5, dtype=torch.bool))


def test_input_shape_errors():
    mha = MultiHeadAttention(4, 2).double()
    with pytest.raises(ValueError, match=r"x must have shape \(B, L, d_model=4\), got \(2, 3, 5\)"):
        mha(randn(2, 3, 5))
    with pytest.raises(ValueError, match=r"x must have shape \(B, L, d_model=4\), got \(3, 4\)"):
        mha(randn(3, 4))
    with pytest.raises(ValueError, match=r"context must have shape .* got \(2, 6, 3\)"):
        mha(randn(2, 3, 4), randn(2, 6, 3))


def test_dropout_on_weights_only_in_training():
    """Seed 001: dropout after softmax -- training rows need not sum to 1; eval is exact."""
    q = randn(1, 6, 4)
    drop = nn.Dropout(0.5)
    _, weights = attention(q, q, q, dropout=drop.eval())
    torch.testing.assert_close(weights.sum(-1), torch.ones(1, 6, dtype=torch.float64), **F64)
    torch.manual_seed(0)
    _, dropped = attention(q, q, q, dropout=drop.train())
    assert (dropped.sum(-1) - 1).abs().max() > 1e-3
    kept = dropped != 0
    torch.testing.assert_close(dropped[kept], 2 * weights[kept], **F64)


# ---- MultiHeadAttention against nn.MultiheadAttention (float64, copied weights) ----

def peer_masks(mask, B, h):
    """Our mask (True = may attend) -> nn.MultiheadAttention's attn_mask / key_padding_mask."""
    if mask is None:
        return {}
    if mask.dim() == 3 and mask.size(1) == 1:  # (B, 1, S) key padding
        return {"key_padding_mask": to_torch_mask(mask[:, 0])}
    if mask.dim() == 3 and mask.size(0) == 1:  # (1, T, S)
        return {"attn_mask": to_torch_mask(mask[0])}
    if mask.dim() == 3:  # (B, T, S) -> (B h, T, S)
        return {"attn_mask": to_torch_mask(mask).repeat_interleave(h, dim=0)}
    return {"attn_mask": to_torch_mask(mask)}  # (T, S)


def make_pair(d=8, h=2, seed=0):
    torch.manual_seed(seed)
    ours = MultiHeadAttention(d, h).double().eval()
    with torch.no_grad():
        ours.in_proj.bias.normal_()
        ours.out_proj.bias.normal_()
    peer = nn.MultiheadAttention(d, h, batch_first=True, dtype=torch.float64).eval()
    copy_attention(ours, peer)
    return ours, peer


@pytest.mark.parametrize("cross", [False, True])
@pytest.mark.parametrize("need_weights", [False, True])
@pytest.mark.parametrize("kind", list(mask_kinds()))
def test_matches_torch_multihead_attention(kind, need_weights, cross):
    mask = mask_kinds()[kind]
    ours, peer = make_pair()
    x = randn(2, 4, 8, seed=1)
    context = randn(2, 4, 8, seed=2) if cross else None
    out, weights = ours(x, context, mask=mask, need_weights=need_weights)
    kv = x if context is None else context
    with torch.no_grad():
        ref, ref_weights = peer(x, kv, kv, need_weights=True, average_attn_weights=False,
                                **peer_masks(mask, 2, 2))
    torch.testing.assert_close(out, ref, **F64)
    if need_weights:
        assert weights.shape == (2, 2, 4, 4)
        torch.testing.assert_close(weights, ref_weights, **F64)
    else:
        assert weights is None


def test_cross_attention_with_different_lengths_matches_torch():
    ours, peer = make_pair(d=12, h=3)
    x, memory = randn(2, 3, 12, seed=4), randn(2, 5, 12, seed=5)
    mask = padding_mask(torch.tensor([[1, 1, 1, 1, 0], [1, 1, 0, 0, 0]]), 0)
    out, weights = ours(x, memory, mask=mask, need_weights=True)
    with torch.no_grad():
        ref, ref_weights = peer(x, memory, memory, key_padding_mask=to_torch_mask(mask[:, 0]),
                                average_attn_weights=False)
    torch.testing.assert_close(out, ref, **F64)
    torch.testing.assert_close(weights, ref_weights, **F64)
    assert weights.shape == (2, 3, 3, 5)


def test_fast_and_reference_paths_agree_with_empty_rows():
    ours, _ = make_pair()
    x = randn(3, 9, 8, seed=6).requires_grad_()  # 9 queries: SDPA's path (fused_pays)
    mask = randn(3, 9, 9, seed=7) > 0.3
    mask[0, 2] = False  # a query with no visible key
    fast, _ = ours(x, mask=mask)
    ref, weights = ours(x, mask=mask, need_weights=True)
    torch.testing.assert_close(fast, ref, **F64)
    torch.testing.assert_close(fast[0, 2], ours.out_proj.bias, **F64)  # zero attention output
    assert weights[0, :, 2].eq(0).all()
    (fast.sum() + ref.sum()).backward()
    assert torch.isfinite(x.grad).all()


def test_a_few_queries_on_a_cpu_take_the_reference_path(monkeypatch):
    """``fused_pays``: under FUSED_MIN_QUERIES queries (a decoding step) attention() computes the
    result, from there on SDPA; either way ``nn.MultiheadAttention``'s output."""
    from decoderkit.nn import attend as module

    calls = []
    sdpa = F.scaled_dot_product_attention
    monkeypatch.setattr(module.F, "scaled_dot_product_attention",
                        lambda *a, **k: calls.append(1) or sdpa(*a, **k))
    ours, peer = make_pair()
    memory = randn(2, 6, 8, seed=9)
    mask = padding_mask(torch.tensor([[1, 1, 1, 1, 0, 0], [1] * 6]), 0)  # (2, 1, 6)
    for T in (1, 4, module.FUSED_MIN_QUERIES - 1, module.FUSED_MIN_QUERIES):
        x = randn(2, T, 8, seed=T)
        out, _ = ours(x, memory, mask=mask)
        with torch.no_grad():
            ref, _ = peer(x, memory, memory, key_padding_mask=to_torch_mask(mask[:, 0]))
        torch.testing.assert_close(out, ref, **F64)
        assert len(calls) == (T >= module.FUSED_MIN_QUERIES)


@pytest.mark.parametrize("shape", [(4, 4), (1, 4, 4), (2, 4, 4)])
def test_mask_broadcast_shapes_agree(shape):
    ours, _ = make_pair()
    x = randn(2, 4, 8, seed=8)
    full, _ = ours(x, mask=causal_mask(4).expand(2, 4, 4))
    out, _ = ours(x, mask=causal_mask(4).expand(shape))
    torch.testing.assert_close(out, full, **F64)


@PROPERTY
@given(st.permutations(range(5)), st.integers(0, 1000))
def test_unmasked_self_attention_is_permutation_equivariant(perm, seed):
    """Seed 000: without masks or positions, permuting input rows permutes output rows."""
    ours, _ = make_pair(seed=seed)
    x = randn(2, 5, 8, seed=seed)
    out, _ = ours(x)
    permuted, _ = ours(x[:, list(perm)])
    torch.testing.assert_close(permuted, out[:, list(perm)], **F64)


# ---- the key/value cache ----

def test_cached_self_attention_equals_causal_full_pass():
    ours, _ = make_pair()
    x = randn(2, 5, 8, seed=9)
    full, _ = ours(x, mask=causal_mask(5))
    cache = KVCache(1, 2, 5, 4, slots=2, dtype=torch.float64, device="cpu")
    steps = [ours(x[:, t:t + 1], cache=cache, at=cache.at(t))[0] for t in range(5)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, **F64)
    with pytest.raises(UsageError, match="6 positions exceed the cache's 5"):
        cache.at(5)


def test_static_cross_cache_replaces_the_context_projection():
    """Cross keys/values projected once from memory give what projecting memory gives; they
    are read, context is not projected again (a changed context is ignored)."""
    ours, _ = make_pair()
    x, memory = randn(2, 3, 8, seed=10), randn(2, 4, 8, seed=11)
    full, _ = ours(x, memory)
    cache = CrossKV(*(t[None] for t in ours.project_kv(memory)))
    first, _ = ours(x[:, :1], memory, cache=cache)
    rest, _ = ours(x[:, 1:], torch.zeros_like(memory), cache=cache)
    torch.testing.assert_close(torch.cat([first, rest], dim=1), full, **F64)


def test_cache_reorder_keeps_rows():
    cache = KVCache(1, 1, 2, 2, slots=3, dtype=torch.float64, device="cpu")
    k = torch.arange(3, dtype=torch.float64).view(3, 1, 1, 1).expand(3, 1, 1, 2)
    cache.write(0, k, -k, cache.at(0))
    cache.reorder(torch.tensor([2, 2, 0]), 1)
    keys, values = cache.keys[0][0, :, :, :1], cache.values[0][0, :, :, :1]
    assert keys[:, 0, 0, 0].tolist() == [2.0, 2.0, 0.0]
    assert values[:, 0, 0, 0].tolist() == [-2.0, -2.0, 0.0]


@pytest.mark.parametrize("need_weights", [False, True])
def test_shared_cross_cache_equals_memory_repeated_per_row(need_weights):
    """A static cache with B rows read by B * G query rows (beam search) gives, row by row,
    what each query row gets from its own copy of its source's memory and mask."""
    ours, _ = make_pair()
    B, G, S = 2, 3, 4
    x, memory = randn(B * G, 2, 8, seed=12), randn(B, S, 8, seed=13)
    mask = torch.tensor([[[True, True, True, False]], [[True, True, True, True]]])  # (B, 1, S)
    cache = CrossKV(*(t[None] for t in ours.project_kv(memory)))
    shared, w_shared = ours(x, memory, mask=mask, cache=cache, need_weights=need_weights)
    rows = torch.arange(B).repeat_interleave(G)  # source of each query row
    own, w_own = ours(x, memory[rows], mask=mask[rows], need_weights=need_weights)
    torch.testing.assert_close(shared, own, **F64)
    if need_weights:
        assert w_shared.shape == (B * G, 2, 2, S)
        torch.testing.assert_close(w_shared, w_own, **F64)
    with pytest.raises(ValueError, match="not a multiple"):
        ours(x[:5], memory, cache=cache)


# ---- blocked values: documented, not hidden ----

@pytest.mark.parametrize("need_weights", [True, False])  # the reference path, the SDPA path
def test_blocked_values_get_zero_weight_but_a_non_finite_one_still_reaches_the_output(
        need_weights):
    """attention()'s documented behaviour: a blocked key's finite value has no effect at all
    (weight exactly 0), while a NaN there gives NaN (0 x NaN), as in PyTorch's attention.
    Cross-attention with a padded key, and causal self-attention's future key."""
    mha = MultiHeadAttention(8, 2).double().eval()
    x, memory = randn(2, 4, 8, seed=20), randn(2, 4, 8, seed=21)
    padded = torch.tensor([True, True, True, False]).expand(2, 1, 4)  # key 3 is padding

    def cross(key3):
        context = memory.clone()
        context[:, 3] = key3
        return mha(x, context, mask=padded, need_weights=need_weights)[0]  # (2, 4, 8)

    def causal(key3):
        y = x.clone()
        y[:, 3] = key3
        out = mha(y, mask=causal_mask(4), need_weights=need_weights)[0]
        return out[:, :3]  # the queries that cannot see position 3

    for attend in (cross, causal):
        torch.testing.assert_close(attend(1e30), attend(0.0), **F64)
        assert attend(float("nan")).isnan().all()
