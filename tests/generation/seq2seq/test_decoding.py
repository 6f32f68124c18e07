"""Generation: cached decoding vs full recomputation, sampling frequencies vs softmax, batch
independence, the seed-004 loop and introspection. Beam search: test_search.py."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest
import torch

from decoderkit import make_model
from decoderkit.base.checks import TEMPERATURE, written
from decoderkit.base.errors import UsageError
from decoderkit.generation.seq2seq.bounds import check_length_penalty
from decoderkit.generation.seq2seq.decoding import IncrementalDecoder, greedy_decode, sample
from decoderkit.generation.seq2seq.search import beam_search
from decoderkit.nn.masks import padding_mask, target_mask

V_SRC, V_TGT, PAD, BOS, EOS = 11, 9, 0, 1, 2


def tiny_model(seed: int = 0, eos_bias: float = 2.0, norm_first: bool = False):
    """A random 2+2-layer model; a raised EOS logit makes sequences end at varied steps."""
    torch.manual_seed(seed)
    model = make_model(V_SRC, V_TGT, N=2, d_model=16, d_ff=32, h=4, dropout=0.1,
                       norm_first=norm_first, max_len=64)
    with torch.no_grad():
        model.generator.proj.bias.normal_(0.0, 1.0)
        model.generator.proj.bias[EOS] += eos_bias
    return model.eval()


def padded_batch(seed: int = 0, lengths=(6, 3, 5, 1)):
    """Sources of different lengths, right-padded: (B, S) ids and their rows unpadded."""
    g = torch.Generator().manual_seed(seed)
    rows = [torch.randint(3, V_SRC, (n,), generator=g) for n in lengths]
    src = torch.full((len(rows), max(lengths)), PAD, dtype=torch.long)
    for i, r in enumerate(rows):
        src[i, :len(r)] = r
    return src, rows


def naive_greedy(model, src_row, max_len):
    """Seed 004's loop: the full prefix each step through the teacher-forced forward, the
    last position's logits, argmax, stop at EOS. src_row (S,) -> list of ids."""
    src = src_row[None]
    generated = [BOS]
    with torch.no_grad():
        for _ in range(max_len):
            tgt = torch.tensor([generated])  # (1, t): grows one token a step
            x = model(src, tgt, padding_mask(src, PAD), target_mask(tgt, PAD))  # (1, t, d)
            nxt = int(model.generator(x)[0, -1].argmax())  # last position only
            generated.append(nxt)
            if nxt == EOS:
                break
    return generated[1:]


def trimmed(tokens, length):
    return tokens[:int(length)].tolist()


# --- the seed 004 loop and cached == recomputed ---------------------------------------

def test_greedy_matches_the_seed_004_loop_per_sequence():
    model = tiny_model(1)
    src, rows = padded_batch(1)
    out = greedy_decode(model, src, None, max_len=12)
    for i, row in enumerate(rows):
        expect = naive_greedy(model, row, 12)
        assert trimmed(out.tokens[i], out.lengths[i]) == expect
        assert out.stop_reasons[i] == ("eos" if expect[-1] == EOS else "max_len")
        assert (out.tokens[i, len(expect):] == PAD).all()  # pad after EOS


def test_cached_logprobs_equal_recomputation_at_every_step():
    """Teacher-force one random prefix through both paths; every step's (N, V) within 1e-5."""
    model = tiny_model(2)
    src, _ = padded_batch(2)
    mask = padding_mask(src, PAD)
    forced = torch.randint(3, V_TGT, (src.size(0), 10))
    with torch.no_grad():
        memory = model.encode(src, mask)
        cached = IncrementalDecoder(model, memory, mask, 10, use_cache=True)
        full = IncrementalDecoder(model, memory, mask, 10, use_cache=False)
        for step in range(10):
            a, b = cached.logprobs(), full.logprobs()
            torch.testing.assert_close(a, b, atol=1e-5, rtol=0, msg=f"step {step}")
            cached.append(forced[:, step])
            full.append(forced[:, step])
        assert cached.cached == 10


def test_expanded_beams_share_cross_attention_and_equal_recomputation():
    """expand(K): the cache keeps one cross-attention row per source and K self-attention
    rows; each row's log-probabilities equal recomputation over its own copy of the source,
    every step, with padded sources and rows of a source taking different tokens."""
    model = tiny_model(4)
    src, _ = padded_batch(4)
    mask = padding_mask(src, PAD)
    B, K = src.size(0), 3
    forced = torch.randint(3, V_TGT, (B * K, 6))
    with torch.no_grad():
        memory = model.encode(src, mask)
        cached = IncrementalDecoder(model, memory, mask, 6, use_cache=True)
        cached.expand(K)
        rows = torch.arange(B).repeat_interleave(K)  # source of each hypothesis
        full = IncrementalDecoder(model, memory[rows], mask[rows], 6, use_cache=False)
        self_kv, cross_kv = cached.cache.self_kv, cached.cache.cross
        assert cross_kv.keys.size(1) == B and self_kv.keys[0].size(1) == B * K
        for step in range(6):
            torch.testing.assert_close(cached.logprobs(), full.logprobs(), atol=1e-5, rtol=0,
                                       msg=f"step {step}")
            cached.append(forced[:, step])
            full.append(forced[:, step])


@pytest.mark.parametrize("norm_first", [False, True])
def test_greedy_cached_equals_uncached_with_mixed_eos(norm_first):
    seed = 15 if norm_first else 3  # seeds whose batches mix EOS and max_len stops
    model = tiny_model(seed, norm_first=norm_first)
    src, _ = padded_batch(seed)
    a = greedy_decode(model, src, None, max_len=15, explain=3)
    b = greedy_decode(model, src, None, max_len=15, use_cache=False, explain=3)
    assert set(a.stop_reasons) == {"eos", "max_len"}  # mixed EOS in one batch
    assert torch.equal(a.tokens, b.tokens) and torch.equal(a.lengths, b.lengths)
    torch.testing.assert_close(a.scores, b.scores, atol=1e-5, rtol=0)
    for sa, sb in zip(a.steps, b.steps, strict=True):  # every step, not just the last
        torch.testing.assert_close(sa.top_logprobs, sb.top_logprobs, atol=1e-5, rtol=0)
        for wa, wb in zip(sa.self_weights + sa.cross_weights,
                          sb.self_weights + sb.cross_weights, strict=True):
            torch.testing.assert_close(wa, wb, atol=1e-5, rtol=0)


def test_cached_decoding_in_float64_agrees_with_float32():
    model = tiny_model(4)
    src, _ = padded_batch(4)
    a = greedy_decode(model, src, None, max_len=10, explain=V_TGT)
    b = greedy_decode(model.double(), src, None, max_len=10, use_cache=False, explain=V_TGT)
    assert torch.equal(a.tokens, b.tokens)
    for sa, sb in zip(a.steps, b.steps, strict=True):
        torch.testing.assert_close(sa.top_logprobs.double(), sb.top_logprobs, atol=1e-5, rtol=0)


def test_sequence_alone_equals_inside_a_padded_batch():
    model = tiny_model(3)
    src, rows = padded_batch(3)
    batch_g = greedy_decode(model, src, None, max_len=12)
    batch_b = beam_search(model, src, None, beam_size=3, max_len=12, n_best=3)
    assert set(batch_g.stop_reasons) == set(batch_b.stop_reasons) == {"eos", "max_len"}
    for i, row in enumerate(rows):
        alone_g = greedy_decode(model, row[None], None, max_len=12)
        assert trimmed(batch_g.tokens[i], batch_g.lengths[i]) == trimmed(alone_g.tokens[0],
                                                                         alone_g.lengths[0])
        torch.testing.assert_close(batch_g.scores[i], alone_g.scores[0], atol=1e-5, rtol=0)
        alone_b = beam_search(model, row[None], None, beam_size=3, max_len=12, n_best=3)
        L = alone_b.nbest_tokens.size(-1)
        assert torch.equal(batch_b.nbest_tokens[i, :, :L], alone_b.nbest_tokens[0])
        assert (batch_b.nbest_tokens[i, :, L:] == PAD).all()
        torch.testing.assert_close(batch_b.nbest_scores[i], alone_b.nbest_scores[0],
                                   atol=1e-5, rtol=0)


@pytest.mark.parametrize("method,kw", [
    (greedy_decode, {}),
    (beam_search, {"beam_size": 3, "n_best": 3}),
    (sample, {"temperature": 1.5}),
])
def test_per_row_bounds_and_seeds_decode_each_row_as_alone(method, kw):
    """One bound (and, sampling, one seed) per row: each row of the batch gives what it gives
    decoded alone with its own bound and seed, whatever the other rows' bounds."""
    model = tiny_model(3, eos_bias=-3.0)  # EOS rare: most rows run to their own bound
    src, rows = padded_batch(3)
    bounds, seeds = [12, 4, 7, 2], [5, 6, 7, 8]
    extra = {"seed": seeds} if method is sample else {}
    batch = method(model, src, None, max_len=bounds, **kw, **extra)
    assert batch.lengths.tolist() != [max(bounds)] * 4 and "max_len" in batch.stop_reasons
    for i, row in enumerate(rows):
        extra = {"seed": seeds[i]} if method is sample else {}
        alone = method(model, row[None], None, max_len=bounds[i], **kw, **extra)
        assert int(batch.lengths[i]) == int(alone.lengths[0]) <= bounds[i]
        assert trimmed(batch.tokens[i], batch.lengths[i]) == trimmed(alone.tokens[0],
                                                                     alone.lengths[0])
        assert batch.stop_reasons[i] == alone.stop_reasons[0]
        torch.testing.assert_close(batch.scores[i], alone.scores[0], atol=1e-5, rtol=0)


def teacher_forced_logp(model, row, seq):
    """log p of each token of ``seq`` given the previous ones, by the teacher-forced forward:
    the model's own (unrenormalised) log-probabilities, float64."""
    tgt = torch.tensor([[BOS] + seq[:-1]])
    with torch.no_grad():
        logp = model.generator(model(row[None], tgt, None, target_mask(tgt, PAD)))[0]
    return logp.double()[torch.arange(len(seq)), torch.tensor(seq)]


@pytest.mark.parametrize("method,kw", [
    (greedy_decode, {}),
    (sample, {"seed": 3}),
    (beam_search, {"beam_size": 3, "length_penalty": 0.0}),
])
def test_pad_and_bos_are_never_generated_and_scores_stay_the_models(method, kw):
    """A model whose generator prefers pad and BOS (its argmax at the first step) still never
    emits them; the score is the sum of the model's own log-probabilities of the chosen
    tokens, not renormalised over the tokens allowed."""
    model = tiny_model(5)
    with torch.no_grad():
        model.generator.proj.bias[[PAD, BOS]] += 6.0
    src, rows = padded_batch(5)
    with torch.no_grad():
        start = torch.full((len(rows), 1), BOS)
        logp = model.generator(model(src, start, padding_mask(src, PAD), None))[:, 0]
    assert set(logp.argmax(-1).tolist()) <= {PAD, BOS}  # unrestricted, they would win
    out = method(model, src, None, max_len=8, **kw)
    for i, row in enumerate(rows):
        seq = trimmed(out.tokens[i], out.lengths[i])
        assert PAD not in seq and BOS not in seq and len(seq) >= 1
        total = teacher_forced_logp(model, row, seq).sum()
        torch.testing.assert_close(out.scores[i].double(), total, atol=1e-5, rtol=0)


def test_min_len_forbids_early_eos_and_max_len_truncates():
    model = tiny_model(6, eos_bias=8.0)  # EOS almost always the argmax
    src, _ = padded_batch(6)
    out = greedy_decode(model, src, None, max_len=9, min_len=4)
    assert (out.tokens[:, :3] != EOS).all()
    assert out.lengths.min() >= 4
    forced = greedy_decode(model, src, None, max_len=5, min_len=5)
    assert forced.tokens.shape == (4, 5) and (forced.tokens[:, :4] != EOS).all()
    assert all(r == ("eos" if t == EOS else "max_len")
               for r, t in zip(forced.stop_reasons, forced.tokens[:, -1].tolist(), strict=True))


# --- sampling -------------------------------------------------------------------------

def test_sampling_is_seedable_and_cache_independent():
    model = tiny_model(10)
    src, _ = padded_batch(10)
    kw = dict(max_len=12, temperature=0.9, top_k=5, top_p=0.9)
    a = sample(model, src, None, seed=7, explain=3, **kw)
    b = sample(model, src, None, seed=7, use_cache=False, explain=3, **kw)
    c = sample(model, src, None, seed=8, **kw)
    assert set(a.stop_reasons) == {"eos", "max_len"}  # mixed EOS in one padded batch
    assert torch.equal(a.tokens, b.tokens) and a.stop_reasons == b.stop_reasons
    for sa, sb in zip(a.steps, b.steps, strict=True):  # every step's log-probabilities
        torch.testing.assert_close(sa.top_logprobs, sb.top_logprobs, atol=1e-5, rtol=0)
    torch.testing.assert_close(a.scores, b.scores, atol=1e-5, rtol=0)
    assert not torch.equal(a.tokens, c.tokens)


def test_sampling_degenerates_to_greedy():
    model = tiny_model(12)
    src, _ = padded_batch(12)
    g = greedy_decode(model, src, None, max_len=10).tokens
    for kw in (dict(top_k=1), dict(top_p=1e-6), dict(temperature=1e-4)):
        assert torch.equal(sample(model, src, None, max_len=10, seed=0, **kw).tokens, g), kw


def test_first_token_frequencies_match_the_filtered_softmax():
    model = tiny_model(13, eos_bias=0.0)
    src = padded_batch(13, lengths=(5,))[0].expand(4000, -1)
    temperature, top_k = 1.5, 4
    out = sample(model, src, None, max_len=1, temperature=temperature, top_k=top_k, seed=1)
    with torch.no_grad():
        logp = IncrementalDecoder(model, model.encode(src[:1]), None, 1, True).logprobs()[0]
    z = logp.double().numpy() / temperature
    keep = np.argsort(-z)[:top_k]
    p = np.zeros_like(z)
    p[keep] = np.exp(z[keep] - z[keep].max())
    p /= p.sum()
    freq = np.bincount(out.tokens[:, 0].numpy(), minlength=V_TGT) / len(src)
    assert set(np.flatnonzero(freq)) <= set(keep)
    np.testing.assert_allclose(freq, p, atol=4 * np.sqrt(0.25 / len(src)))


# --- introspection and input checks ---------------------------------------------------

def test_explain_trace_is_json_with_valid_attention():
    model = tiny_model(14)
    src, rows = padded_batch(14)
    out = greedy_decode(model, src, None, max_len=8, explain=3)
    for i, row in enumerate(rows):
        steps = out.explain(i, token_str=lambda t: f"<{t}>")
        json.dumps(steps)
        assert len(steps) == out.lengths[i]
        for t, s in enumerate(steps):
            assert s["id"] == out.tokens[i, t] and s["token"] == f"<{s['id']}>"
            alts = [a["logprob"] for a in s["alternatives"]]
            assert len(alts) == 3 and alts == sorted(alts, reverse=True)
            assert s["alternatives"][0]["id"] == s["id"]  # greedy takes the top one
            self_w, cross_w = np.array(s["self_attention"]), np.array(s["cross_attention"])
            assert self_w.shape == (2, 4, t + 1) and cross_w.shape == (2, 4, src.size(1))
            np.testing.assert_allclose(self_w.sum(-1), 1.0, atol=1e-5)
            np.testing.assert_allclose(cross_w.sum(-1), 1.0, atol=1e-5)
            assert (cross_w[..., len(row):] == 0).all()  # padded source positions


def test_model_mode_is_restored_and_dropout_is_off():
    model = tiny_model(15).train()
    src, _ = padded_batch(15)
    a = greedy_decode(model, src, None, max_len=6)
    b = greedy_decode(model, src, None, max_len=6)
    assert model.training and torch.equal(a.tokens, b.tokens)


NAN, INF = float("nan"), float("inf")


@pytest.mark.parametrize("call,match", [
    (lambda m, s: greedy_decode(m, s.float(), None, max_len=3), "src"),
    (lambda m, s: greedy_decode(m, s[:0], None, max_len=3), r"src .* B >= 1, got \(0, 6\)"),
    (lambda m, s: greedy_decode(m, s, torch.ones(4, 6), max_len=3), "src_mask"),
    (lambda m, s: greedy_decode(m, s, None, max_len=0),
     r"max_len must be an integer in \[1, 64\], got 0"),
    (lambda m, s: greedy_decode(m, s, None, max_len=65), r"max_len .* got 65"),
    (lambda m, s: greedy_decode(m, s, None, max_len=3.0), r"max_len .* got 3\.0"),
    (lambda m, s: greedy_decode(m, s, None, max_len=True), r"max_len .* got True"),
    (lambda m, s: greedy_decode(m, s, None, max_len=[3, 3]), r"max_len .* one int per .*\(4\)"),
    (lambda m, s: greedy_decode(m, s, None, max_len=[3, 3, 0, 3]), r"max_len .* got 0"),
    (lambda m, s: greedy_decode(m, s, None, max_len=3, min_len=4), r"min_len .*\[0, 3\], got 4"),
    (lambda m, s: greedy_decode(m, s, None, max_len=3, min_len=-1), r"min_len .* got -1"),
    (lambda m, s: greedy_decode(m, s, None, max_len=3, explain=-1), r"explain .* >= 0, got -1"),
    (lambda m, s: greedy_decode(m, s, None, max_len=3, explain=1.5), r"explain .* got 1\.5"),
    (lambda m, s: beam_search(m, s, None, beam_size=0, max_len=3), r"beam_size .* got 0"),
    (lambda m, s: beam_search(m, s, None, beam_size=-2, max_len=3), r"beam_size .* got -2"),
    (lambda m, s: beam_search(m, s, None, beam_size=2.0, max_len=3), r"beam_size .* got 2\.0"),
    (lambda m, s: beam_search(m, s, None, beam_size=V_TGT, max_len=3),
     rf"beam_size must be an integer in \[1, {V_TGT - 2}\]"),  # pad and BOS are never candidates
    (lambda m, s: beam_search(m, s, None, beam_size=2, n_best=3, max_len=3),
     r"n_best .*\[1, 2\], got 3"),
    (lambda m, s: beam_search(m, s, None, beam_size=2, n_best=0, max_len=3), r"n_best .* got 0"),
    (lambda m, s: beam_search(m, s, None, beam_size=2, max_len=3, length_penalty=NAN),
     r"length_penalty must be a finite number in \[0, 10\], got nan"),
    (lambda m, s: beam_search(m, s, None, beam_size=2, max_len=3, length_penalty=INF),
     r"length_penalty .* got inf"),
    (lambda m, s: beam_search(m, s, None, beam_size=2, max_len=3, length_penalty=-1.0),
     r"length_penalty .* got -1\.0"),
    (lambda m, s: sample(m, s, None, max_len=3, temperature=0.0), r"temperature .* got 0"),
    (lambda m, s: sample(m, s, None, max_len=3, temperature=INF), r"temperature .* got inf"),
    (lambda m, s: sample(m, s, None, max_len=3, temperature=NAN), r"temperature .* got nan"),
    (lambda m, s: sample(m, s, None, max_len=3, top_k=-1), r"top_k .* >= 0, got -1"),
    (lambda m, s: sample(m, s, None, max_len=3, top_k=2.5), r"top_k .* got 2\.5"),
    (lambda m, s: sample(m, s, None, max_len=3, top_p=0.0), r"top_p .* 1.0\] .* got 0"),
    (lambda m, s: sample(m, s, None, max_len=3, top_p=1.5), r"top_p .* got 1\.5"),
    (lambda m, s: sample(m, s, None, max_len=3, top_p=NAN), r"top_p .* got nan"),
    (lambda m, s: sample(m, s, None, max_len=3, seed=1.5), r"seed .* got 1\.5"),
    (lambda m, s: sample(m, s, None, max_len=3, seed="7"), r"seed .* got '7'"),
    (lambda m, s: sample(m, s, None, max_len=3, seed=[1, 2]), r"seed .* one int per .*\(4\)"),
    (lambda m, s: sample(m, s, None, max_len=3, seed=2 ** 32),
     r"seed must be an integer in \[0, 4294967295\], got 4294967296"),
    (lambda m, s: sample(m, s, None, max_len=3, seed=-1), r"seed .* got -1"),
])
def test_bad_arguments_raise_naming_them(call, match):
    """Each refusal is a UsageError naming the argument, the expected and the actual value."""
    src, _ = padded_batch(0)
    with pytest.raises(UsageError, match=match):
        call(tiny_model(0), src)


# --- numbers in range that the model's dtype cannot hold ------------------------------------

TINY32 = torch.finfo(torch.float32).tiny
TINY64 = torch.finfo(torch.float64).tiny


@pytest.mark.parametrize("dtype,kw,limit", [
    (torch.float32, {"temperature": 1e-308}, TINY32),  # 0 in float32: NaN probabilities
    (torch.float32, {"temperature": 1e-300}, TINY32),
    (torch.float32, {"temperature": 1e-40}, TINY32),  # a float32 denormal
    (torch.float32, {"top_p": 1e-300}, TINY32),  # 0 in float32: every token dropped
    (torch.float64, {"temperature": 1e-320}, TINY64),  # a float64 denormal
    (torch.float64, {"top_p": 1e-310}, TINY64),
])
def test_sampling_values_the_models_dtype_cannot_hold_are_refused_naming_the_limit(
        dtype, kw, limit):
    src, _ = padded_batch(0)
    name, value = next(iter(kw.items()))
    dt = str(dtype).removeprefix("torch.")
    with pytest.raises(UsageError, match=rf"^{name} must be .*{re.escape(written(limit, 1))}.* for "
                                         rf"a {dt} model .* got {re.escape(repr(value))}$"):
        sample(tiny_model(0).to(dtype), src, None, max_len=3, seed=0, **kw)


def test_a_float64_model_samples_at_values_a_float32_one_refuses():
    """1e-300 is a normal float64: the temperature is greedy and the nucleus the top token."""
    model, (src, _) = tiny_model(2).double(), padded_batch(2)
    greedy = greedy_decode(model, src, None, max_len=10).tokens
    for kw in ({"temperature": 1e-300}, {"top_p": 1e-300}):
        assert torch.equal(sample(model, src, None, max_len=10, seed=0, **kw).tokens, greedy)


def test_the_smallest_temperature_is_greedy_even_when_every_logit_overflows():
    """Pad holds almost all the mass, so every allowed log-probability is about -60: divided
    by float32's smallest normal temperature each is -inf, and unshifted the softmax is NaN."""
    model, (src, _) = tiny_model(4), padded_batch(4)
    with torch.no_grad():
        model.generator.proj.bias[PAD] += 60.0
    greedy = greedy_decode(model, src, None, max_len=8)
    got = sample(model, src, None, max_len=8, temperature=TINY32, seed=1)
    assert torch.equal(got.tokens, greedy.tokens)
    assert torch.isfinite(got.scores).all()


def test_the_largest_temperature_samples_every_allowed_token_and_no_banned_one():
    """At the largest temperature (base.checks.TEMPERATURE) every allowed token is drawn (no
    NaN from the banned ones' -inf); above it the library refuses, as the CLI and the server."""
    model = tiny_model(5)
    src = torch.full((400, 1), 5, dtype=torch.long)
    out = sample(model, src, None, max_len=1, temperature=TEMPERATURE.high, seed=3)
    first = set(out.tokens[:, 0].tolist())
    assert first == set(range(V_TGT)) - {PAD, BOS}
    with pytest.raises(UsageError, match=r"temperature must be a finite number in "
                                         r"\[1.18e-38, 100\] for a float32 model"):
        sample(model, src, None, max_len=1, temperature=100.5, seed=3)


def test_a_length_penalty_past_its_range_or_the_length_power_is_refused():
    """Past base.checks.LENGTH_PENALTY (10) refused as everywhere; within it, past what
    keeps length ** length_penalty finite in the dtype (log(float16 max) / log(max_len) at
    max_len 8: 5.33) refused naming that bound; within both every score stays finite."""
    model, (src, _) = tiny_model(6), padded_batch(6)
    with pytest.raises(UsageError, match=r"length_penalty must be a finite number in \[0, 10\]"
                                         r", got 200"):
        beam_search(model, src, None, beam_size=3, max_len=8, length_penalty=200)
    bound = math.log(torch.finfo(torch.float16).max) / math.log(8)
    shown = re.escape(written(bound, -1))
    with pytest.raises(UsageError, match=rf"length_penalty must be .*\[0.0, {shown}\] for "
                                         r"a float16 model .* got 6"):
        check_length_penalty(6, 8, torch.float16)
    out = beam_search(model, src, None, beam_size=3, max_len=8, length_penalty=10)
    assert torch.isfinite(out.scores).all() and (out.scores < 0).all()








@pytest.mark.parametrize("retire", [False, True])
def test_forced_eos_ends_a_row_at_its_bound_and_changes_nothing_before(retire):
    """``forced_eos``: a row that reaches its own bound ends with EOS (log-prob 0 added, as
    Hugging Face's forced_eos_token_id); rows that end earlier, and every earlier token, are
    as without it. Beam search too (both rules)."""
    model = tiny_model(eos_bias=0.0)
    c = model.config
    src = torch.randint(4, c.src_vocab, (6, 7), generator=torch.Generator().manual_seed(3))
    limits = [3, 4, 5, 6, 7, 8]
    plain = greedy_decode(model, src, None, max_len=limits)
    forced = greedy_decode(model, src, None, max_len=limits, forced_eos=True)
    assert "max_len" in plain.stop_reasons and set(forced.stop_reasons) == {"eos"}
    for b, n in enumerate(limits):
        a, f = plain.tokens[b, :int(plain.lengths[b])], forced.tokens[b, :int(forced.lengths[b])]
        if plain.stop_reasons[b] == "eos":
            assert torch.equal(a, f) and float(plain.scores[b]) == float(forced.scores[b])
        else:
            assert len(f) == n and int(f[-1]) == c.eos_id and torch.equal(a[:-1], f[:-1])
    beam = beam_search(model, src, None, beam_size=3, max_len=limits, retire=retire,
                       forced_eos=True, n_best=3)
    assert set(beam.stop_reasons) == {"eos"} and bool(torch.isfinite(beam.nbest_scores).all())
