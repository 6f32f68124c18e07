"""Beam search: beam 1 = greedy, cache = no cache, exact top-K against brute force on two steps,
scores = length-normalised teacher-forced log-probabilities."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from generation.seq2seq.test_decoding import BOS, EOS, PAD, V_TGT, padded_batch, tiny_model, trimmed

from decoderkit.base.errors import UsageError
from decoderkit.generation.seq2seq.decoding import greedy_decode
from decoderkit.generation.seq2seq.search import beam_search
from decoderkit.nn.masks import padding_mask, target_mask

# --- beam search ----------------------------------------------------------------------

def test_beam_size_one_equals_greedy():
    model = tiny_model(7)
    src, _ = padded_batch(7)
    g = greedy_decode(model, src, None, max_len=12)
    b = beam_search(model, src, None, beam_size=1, max_len=12, length_penalty=0.0)
    assert torch.equal(g.tokens, b.tokens) and g.stop_reasons == b.stop_reasons
    torch.testing.assert_close(g.scores, b.scores, atol=1e-6, rtol=0)


@pytest.mark.parametrize("alpha,seed", [(0.0, 5), (1.0, 10)])  # seeds with mixed stops
def test_beam_with_cache_equals_without(alpha, seed):
    model = tiny_model(seed)
    src, _ = padded_batch(seed)
    a = beam_search(model, src, None, beam_size=4, max_len=12, n_best=4, length_penalty=alpha,
                    explain=2)
    b = beam_search(model, src, None, beam_size=4, max_len=12, n_best=4, length_penalty=alpha,
                    use_cache=False, explain=2)
    assert set(a.stop_reasons) == {"eos", "max_len"}
    assert torch.equal(a.nbest_tokens, b.nbest_tokens) and a.stop_reasons == b.stop_reasons
    torch.testing.assert_close(a.nbest_scores, b.nbest_scores, atol=1e-5, rtol=0)
    for sa, sb in zip(a.steps, b.steps, strict=True):
        torch.testing.assert_close(sa.top_logprobs, sb.top_logprobs, atol=1e-5, rtol=0)



@pytest.mark.parametrize("retire", [False, True])
@pytest.mark.parametrize("alpha,seed,use_cache", [(0.0, 5, True), (1.0, 10, True),
                                                  (1.0, 10, False)])
def test_sources_leaving_the_batch_change_no_result(alpha, seed, use_cache, retire,
                                                    monkeypatch):
    """A source whose hypotheses are all done (Hugging Face's rule, ``retire``: whose list of
    finished ones can no longer change) leaves the batch (its rows, cache and memory rows
    dropped): every source's n-best is the one the whole batch run to the end gives."""
    import decoderkit.generation.seq2seq.search as search
    from decoderkit.generation.seq2seq.step import IncrementalDecoder

    model = tiny_model(seed)
    src, _ = padded_batch(seed)
    left, keep_sources = [], IncrementalDecoder.keep_sources
    monkeypatch.setattr(IncrementalDecoder, "keep_sources", lambda self, sources, beam: (
        left.append(len(sources)), keep_sources(self, sources, beam))[1])
    kw = dict(beam_size=4, max_len=list(range(4, 4 + src.size(0))), n_best=4,
              length_penalty=alpha, use_cache=use_cache, retire=retire)
    a = beam_search(model, src, None, **kw)
    assert left and left[-1] < src.size(0)  # some left early, the batch went on without them
    monkeypatch.setattr(search, "compacting", lambda model, explain, step: False)
    b = beam_search(model, src, None, **kw)
    assert torch.equal(a.nbest_tokens, b.nbest_tokens) and a.stop_reasons == b.stop_reasons
    assert torch.equal(a.tokens, b.tokens) and torch.equal(a.lengths, b.lengths)
    torch.testing.assert_close(a.nbest_scores, b.nbest_scores, atol=1e-5, rtol=0)


ALLOWED = [t for t in range(V_TGT) if t not in (PAD, BOS)]  # never generated: pad, BOS


def brute_force_two_steps(model, src_row, alpha):
    """Every sequence of at most 2 generatable tokens ([EOS] or [a, b], a != EOS), scored by
    teacher forcing all [BOS, a] prefixes at once: sum log p / len ** alpha (the model's own,
    unrenormalised log-probabilities), best first."""
    first = torch.arange(V_TGT)
    tgt = torch.stack([torch.full_like(first, BOS), first], dim=1)  # (V, 2): [BOS, a]
    src = src_row[None].expand(V_TGT, -1)
    with torch.no_grad():
        x = model(src, tgt, padding_mask(src, PAD), target_mask(tgt, PAD))
        logp = model.generator(x).double()  # (V, 2, V)
    scored = [(float(logp[0, 0, EOS]), [EOS])]
    for a, b in itertools.product(ALLOWED, repeat=2):
        if a != EOS:
            scored.append((float(logp[a, 0, a] + logp[a, 1, b]) / 2 ** alpha, [a, b]))
    return sorted(scored, key=lambda s: -s[0])


@pytest.mark.parametrize("retire", [False, True])
@pytest.mark.parametrize("alpha", [0.0, 0.6, 1.0])
def test_beam_as_wide_as_the_vocabulary_is_exact_on_two_steps(alpha, retire):
    """With K = every generatable token, every one-token prefix survives, so two steps of beam
    search must return the true top-K of all sequences of length <= 2: an independent check
    of the ranking. Hugging Face's rule (``retire``) keeps them too, and the ended ones."""
    model = tiny_model(9, eos_bias=2.5)
    src, rows = padded_batch(9, lengths=(4, 2))
    K = len(ALLOWED)
    out = beam_search(model, src, None, beam_size=K, max_len=2, n_best=K, length_penalty=alpha,
                      retire=retire)
    for i, row in enumerate(rows):
        expect = brute_force_two_steps(model, row, alpha)[:K]
        got = [trimmed(torch.tensor(seq), 1 + (seq[0] != EOS)) for seq in
               out.nbest_tokens[i].tolist()]
        assert got == [seq for _, seq in expect]
        np.testing.assert_allclose(out.nbest_scores[i].numpy(), [s for s, _ in expect],
                                   atol=1e-5)


def test_retiring_beam_offers_no_explain():
    model = tiny_model(1)
    src, _ = padded_batch(1)
    with pytest.raises(UsageError, match="explain"):
        beam_search(model, src, None, beam_size=2, max_len=4, retire=True, explain=2)


def test_beam_scores_are_normalised_log_probabilities_and_sorted():
    model = tiny_model(10)
    src, rows = padded_batch(10)
    out = beam_search(model, src, None, beam_size=3, max_len=10, n_best=3, length_penalty=0.7)
    assert (out.nbest_scores[:, :-1] >= out.nbest_scores[:, 1:]).all()
    for i, row in enumerate(rows):
        seq = trimmed(out.tokens[i], out.lengths[i])
        tgt = torch.tensor([[BOS] + seq[:-1]])
        with torch.no_grad():
            logp = model.generator(model(row[None], tgt, None, target_mask(tgt, PAD)))[0]
        total = logp[torch.arange(len(seq)), torch.tensor(seq)].sum()
        torch.testing.assert_close(out.scores[i], total / len(seq) ** 0.7, atol=1e-5, rtol=0)
