"""A compiled decoding step decodes exactly as the eager one, and refuses stale weights.

Compiling is slow on a small CPU: these tests keep to a few batch shapes of one tiny model.
"""

from __future__ import annotations

import pytest
import torch
from torch._dynamo.utils import counters

from decoderkit import make_model
from decoderkit.generation.seq2seq.compiled import compile_step
from decoderkit.generation.seq2seq.decoding import greedy_decode, sample
from decoderkit.nn.packing import prepack
from decoderkit.generation.seq2seq.search import beam_search


def tiny(seed: int):
    torch.manual_seed(seed)
    return make_model(19, 17, N=2, d_model=16, d_ff=32, h=2, dropout=0.0).eval()


def assert_same(a, b):
    assert torch.equal(a.tokens, b.tokens) and a.stop_reasons == b.stop_reasons
    assert torch.equal(a.lengths, b.lengths)
    torch.testing.assert_close(a.scores, b.scores, atol=1e-5, rtol=1e-5)


def test_compiled_step_decodes_as_the_eager_step():
    model = tiny(5)
    step = compile_step(model)
    src = torch.randint(3, 19, (3, 7), generator=torch.Generator().manual_seed(0))
    src[1, 5:] = model.config.pad_id  # a padded row: the source mask matters
    graphs = counters["stats"]["unique_graphs"]
    assert_same(greedy_decode(model, src, None, max_len=9, min_len=3),
                greedy_decode(model, src, None, max_len=9, min_len=3, step=step))
    assert counters["stats"]["unique_graphs"] > graphs  # the step was compiled, not skipped
    assert_same(sample(model, src, None, max_len=9, seed=4, top_k=5),
                sample(model, src, None, max_len=9, seed=4, top_k=5, step=step))
    a = beam_search(model, src, None, beam_size=3, max_len=9, n_best=2)
    b = beam_search(model, src, None, beam_size=3, max_len=9, n_best=2, step=step)
    assert_same(a, b)
    assert torch.equal(a.nbest_tokens, b.nbest_tokens)
    one = src[:1]  # a new batch size: compiled again, same results
    assert_same(greedy_decode(model, one, None, max_len=9),
                greedy_decode(model, one, None, max_len=9, step=step))
    a = greedy_decode(model, one, None, max_len=9, explain=3)  # weights: the eager step
    b = greedy_decode(model, one, None, max_len=9, explain=3, step=step)
    assert a.explain(0) == b.explain(0)


def test_autotuned_step_decodes_as_the_eager_step():
    model = tiny(8)
    src = torch.randint(3, 19, (2, 6), generator=torch.Generator().manual_seed(2))
    assert_same(greedy_decode(model, src, None, max_len=7),
                greedy_decode(model, src, None, max_len=7, step=compile_step(model, True)))


def test_compiled_step_refuses_changed_weights_and_other_models():
    model = tiny(6)
    src = torch.randint(3, 19, (2, 5), generator=torch.Generator().manual_seed(1))
    step = compile_step(model)
    first = greedy_decode(model, src, None, max_len=6, step=step)
    assert_same(first, greedy_decode(model, src, None, max_len=6))
    with pytest.raises(ValueError, match="another model"):
        greedy_decode(tiny(6), src, None, max_len=6, step=step)
    with torch.no_grad():
        model.generator.proj.weight.mul_(-1.0)  # an in-place update after compiling
    with pytest.raises(ValueError, match="weights changed"):
        greedy_decode(model, src, None, max_len=6, step=step)
    fresh = greedy_decode(model, src, None, max_len=6, step=compile_step(model))
    eager = greedy_decode(model, src, None, max_len=6)
    assert_same(fresh, eager)  # compiled again, with the new weights
    assert not torch.equal(first.tokens, eager.tokens)


def test_step_must_be_callable():
    with pytest.raises(TypeError, match="step must be callable"):
        greedy_decode(tiny(7), torch.ones(1, 3, dtype=torch.long), None, max_len=2, step=3)
    with pytest.raises(TypeError, match="model must be an EncoderDecoder"):
        compile_step(torch.nn.Linear(2, 2))
    with pytest.raises(ValueError, match="without prepack"):
        compile_step(prepack(tiny(7)))
