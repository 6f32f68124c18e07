"""Token embeddings, sinusoidal positions (every identity of seed 000) and the generator."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch

from conftest import F64, as_np, randn, randomize
from decoderkit import Generator, PositionalEncoding, TokenEmbedding, sinusoidal_encoding
from decoderkit.base.errors import UsageError
from decoderkit.nn.seq2seq.model import EncoderDecoder, ModelConfig

pytestmark = pytest.mark.usefixtures("seeded")


def np_pe(max_len: int, d: int) -> np.ndarray:
    """PE(p, 2i) = sin(p w_i), PE(p, 2i+1) = cos(p w_i), w_i = 10000^(-2i/d)."""
    p = np.arange(max_len, dtype=np.float64)[:, None]
    phase = p * np_omega(d)[None, :]
    out = np.empty((max_len, d))
    out[:, 0::2], out[:, 1::2] = np.sin(phase), np.cos(phase)
    return out


def np_omega(d: int) -> np.ndarray:
    return 10000.0 ** (-2.0 * np.arange(d // 2) / d)


# ---- token embeddings ----

def test_token_embedding_scales_by_sqrt_d():
    emb = TokenEmbedding(11, 16).double()
    ids = torch.tensor([[0, 3, 10], [7, 7, 1]])
    expected = as_np(emb.lut.weight)[ids.numpy()] * 4.0  # sqrt(16)
    np.testing.assert_allclose(as_np(emb(ids)), expected, **F64)


@pytest.mark.parametrize("bad", [11, 12, -1])
def test_token_id_outside_vocab(bad):
    emb = TokenEmbedding(11, 4)
    with pytest.raises(ValueError, match=rf"token id {bad} is outside the vocabulary \[0, 11\)"):
        emb(torch.tensor([[1, bad, 2]]))


def test_token_ids_must_be_integer_pairs():
    emb = TokenEmbedding(11, 4)
    with pytest.raises(TypeError, match="ids must hold integer token ids, got dtype torch.float32"):
        emb(torch.tensor([[1.0, 2.0]]))
    with pytest.raises(ValueError, match=r"ids must have shape \(B, L\)"):
        emb(torch.tensor([1, 2]))


# ---- sinusoidal encoding ----

@pytest.mark.parametrize("max_len,d", [(1, 2), (10, 16), (50, 6), (100, 64)])
def test_matches_formula(max_len, d):
    pe = sinusoidal_encoding(max_len, d, torch.float64)
    assert pe.shape == (max_len, d) and pe.dtype == torch.float64
    np.testing.assert_allclose(pe.numpy(), np_pe(max_len, d), rtol=0, atol=1e-13)


def test_float32_table_is_correctly_rounded():
    """Computed in float64, cast once: within half a float32 ulp of the formula (seed 000's
    float32 exp-form implementation differs by up to 1.1e-7)."""
    pe = sinusoidal_encoding(10, 16)
    assert pe.dtype == torch.float32
    assert np.abs(pe.numpy().astype(np.float64) - np_pe(10, 16)).max() <= 2.0 ** -25


def test_seed_entry_range():
    """Seed 000: d = 16, 10 positions -> entry range [-0.989992, 1.000000]."""
    pe = sinusoidal_encoding(10, 16, torch.float64)
    assert f"[{pe.min().item():.6f},{pe.max().item():.6f}]" == "[-0.989992,1.000000]"


def test_position_zero_bounds_and_norm():
    """p = 0: even channels 0, odd 1; all entries in [-1, 1]; ||PE(p)||^2 = d / 2."""
    d = 64
    pe = sinusoidal_encoding(300, d, torch.float64)
    assert pe[0, 0::2].eq(0).all() and pe[0, 1::2].eq(1).all()
    assert pe.abs().max() <= 1.0
    torch.testing.assert_close(pe.square().sum(-1), torch.full((300,), d / 2.0,
                                                               dtype=torch.float64), **F64)


@pytest.mark.parametrize("k", [1, 7, 13, 40])
def test_offset_is_one_linear_map(k):
    """PE(p + k) = M_k PE(p) for every p, M_k block-diagonal with rotations
    [[cos(k w_i), sin(k w_i)], [-sin(k w_i), cos(k w_i)]] acting on (sin, cos) pairs."""
    d, n = 16, 60
    M = np.zeros((d, d))
    for i, w in enumerate(np_omega(d)):
        c, s = math.cos(k * w), math.sin(k * w)
        M[2 * i:2 * i + 2, 2 * i:2 * i + 2] = [[c, s], [-s, c]]
    pe = sinusoidal_encoding(n + k, d, torch.float64).numpy()
    np.testing.assert_allclose(pe[:n] @ M.T, pe[k:k + n], rtol=0, atol=1e-12)


@pytest.mark.parametrize("k", [0, 1, 5, 23])
def test_dot_product_and_distance_depend_only_on_offset(k):
    """PE(p).PE(p+k) = sum_i cos(k w_i); ||PE(p) - PE(p+k)||^2 = 2 sum_i (1 - cos(k w_i))."""
    d, n = 32, 40
    pe = sinusoidal_encoding(n + k, d, torch.float64).numpy()
    cosines = np.cos(k * np_omega(d))
    dots = (pe[:n] * pe[k:k + n]).sum(-1)
    dist2 = ((pe[:n] - pe[k:k + n]) ** 2).sum(-1)
    np.testing.assert_allclose(dots, np.full(n, cosines.sum()), rtol=0, atol=1e-12)
    np.testing.assert_allclose(dist2, np.full(n, 2.0 * (1.0 - cosines).sum()), rtol=0, atol=1e-12)


def test_distance_is_not_monotonic_and_low_pairs_move_faster():
    """Seed 000: distance oscillates in k; pair i moves 2 sin(w_i / 2) a step, fastest at i = 0."""
    d = 64
    pe = sinusoidal_encoding(101, d, torch.float64).numpy()
    dist = np.linalg.norm(pe[1:] - pe[0], axis=-1)  # k = 1 .. 100
    assert (np.diff(dist) < 0).any() and (np.diff(dist) > 0).any()
    pairs = pe.reshape(101, d // 2, 2)
    step = np.linalg.norm(pairs[1:] - pairs[:-1], axis=-1)  # (100, d/2)
    np.testing.assert_allclose(step, np.broadcast_to(2 * np.sin(np_omega(d) / 2), step.shape),
                               rtol=0, atol=1e-12)
    assert (np.diff(step[0]) < 0).all()


@pytest.mark.parametrize("max_len,d,message", [
    (0, 4, "max_len must be an integer >= 1, got 0"),
    (5, 3, "d_model must be even for sinusoidal positions, got 3"),
    (5, 0, r"d_model must be an integer >= 2, got 0")])
def test_bad_sizes(max_len, d, message):
    with pytest.raises(ValueError, match=message):
        sinusoidal_encoding(max_len, d)


# ---- the positional-encoding module ----

def test_pe_is_a_buffer_in_the_state_dict():
    """Seed 001: registered buffer -- saved and moved with the module, never optimised."""
    pe = PositionalEncoding(8)
    assert list(pe.state_dict()) == ["pe"] and pe.state_dict()["pe"].shape == (5000, 8)
    assert not list(pe.parameters())
    assert not pe.pe.requires_grad
    assert pe.double().pe.dtype == torch.float64
    other = PositionalEncoding(8)
    other.pe.zero_()
    other.load_state_dict(PositionalEncoding(8).state_dict())
    assert torch.equal(other.pe, sinusoidal_encoding(5000, 8))


@pytest.fixture
def float64_default():
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(previous)


def test_pe_table_follows_default_dtype(float64_default):
    """Built under float64 the table is exact; a float32 table cast up is only rounded."""
    exact = PositionalEncoding(16, max_len=10).pe
    assert exact.dtype == torch.float64
    np.testing.assert_allclose(exact.numpy(), np_pe(10, 16), rtol=0, atol=1e-13)
    widened = PositionalEncoding(16, max_len=10).float().double().pe
    assert 0 < (widened - exact).abs().max() <= 2.0 ** -25


def test_pe_forward_adds_rows_and_offsets(float64_default):
    pe = PositionalEncoding(6, dropout=0.5, max_len=12).eval()
    x = randn(3, 7, 6)
    table = sinusoidal_encoding(12, 6, torch.float64)
    torch.testing.assert_close(pe(x), x + table[:7], **F64)  # broadcast over the batch
    torch.testing.assert_close(pe(x[:, 4:], offset=4), pe(x)[:, 4:], **F64)
    pe(torch.zeros(1, 2, 6, dtype=torch.float64), offset=10)  # last rows fit exactly
    with pytest.raises(ValueError, match="position 12 exceeds max_len 12"):
        pe(torch.zeros(1, 3, 6, dtype=torch.float64), offset=10)


# ---- generator ----

def test_generator_log_softmax():
    """Seed 001: Linear + log_softmax, (B, T, d) -> (B, T, V) log-probabilities."""
    gen = randomize(Generator(6, 9).double())
    x = randn(2, 3, 6)
    logits = as_np(x) @ as_np(gen.proj.weight).T + as_np(gen.proj.bias)
    shifted = logits - logits.max(-1, keepdims=True)
    ref = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
    out = gen(x)
    assert out.shape == (2, 3, 9) and (out <= 0).all()
    np.testing.assert_allclose(as_np(out), ref, **F64)
    torch.testing.assert_close(out.exp().sum(-1), torch.ones(2, 3, dtype=torch.float64), **F64)
    np.testing.assert_allclose(as_np(gen.logits(x)), logits, **F64)  # what a fused loss takes


@pytest.mark.parametrize("max_len, d", [(7, 2), (50, 16), (20, 10)])
def test_split_layout_is_all_sines_then_all_cosines(max_len, d):
    """Marian's table: PE(p, i) = sin(p w_i), PE(p, d/2 + i) = cos(p w_i), w_i = 10000^(-2i/d)."""
    p = np.arange(max_len)[:, None]
    w = 10000.0 ** (-2 * np.arange(d // 2) / d)
    expected = np.concatenate([np.sin(p * w), np.cos(p * w)], axis=1)
    got = sinusoidal_encoding(max_len, d, torch.float64, layout="split").numpy()
    np.testing.assert_allclose(got, expected, **F64)
    interleaved = sinusoidal_encoding(max_len, d, torch.float64).numpy()
    perm = np.concatenate([np.arange(0, d, 2), np.arange(1, d, 2)])  # one channel permutation
    np.testing.assert_array_equal(got, interleaved[:, perm])


@pytest.mark.parametrize("max_len, d", [(7, 4), (50, 16), (20, 10)])
def test_marian_layout_has_marians_own_frequencies(max_len, d):
    """Marian's C++ table (``sinusoidalPositionEmbeddings``): split, w_i = 1e-4^(i/(d/2 - 1))."""
    p = np.arange(max_len)[:, None]
    w = 1e-4 ** (np.arange(d // 2) / (d // 2 - 1))
    expected = np.concatenate([np.sin(p * w), np.cos(p * w)], axis=1)
    got = sinusoidal_encoding(max_len, d, torch.float64, layout="marian").numpy()
    np.testing.assert_allclose(got, expected, **F64)
    with pytest.raises(UsageError, match="needs d_model >= 4, got 2"):
        sinusoidal_encoding(4, 2, layout="marian")


def test_layouts_are_checked():
    with pytest.raises(UsageError, match="layout"):
        sinusoidal_encoding(4, 8, layout="sideways")
    with pytest.raises(UsageError, match="positions"):
        ModelConfig(src_vocab=8, tgt_vocab=8, positions="sideways")
    with pytest.raises(UsageError, match="scale_embeddings"):
        ModelConfig(src_vocab=8, tgt_vocab=8, scale_embeddings=1)


def test_unscaled_token_embedding_is_the_plain_lookup():
    emb = TokenEmbedding(10, 6, scale=False)
    ids = torch.tensor([[1, 2, 9]])
    assert torch.equal(emb(ids), emb.lut.weight[ids])


def test_new_options_default_to_the_paper():
    c = ModelConfig(src_vocab=8, tgt_vocab=8)
    assert c.positions == "interleaved" and c.scale_embeddings
    model = EncoderDecoder(dataclasses.replace(c, positions="split", scale_embeddings=False))
    assert not model.src_embed.scale
    assert torch.equal(model.tgt_pos.pe, sinusoidal_encoding(512, 512, layout="split"))
