"""generation.lm.complete: cached decoding against recomputing the whole (cropped) context each
step, batched prompts against each prompt alone, seeded sampling, streaming, the context limit."""

from __future__ import annotations

import pytest
import torch

from decoderkit.base.errors import UsageError
from decoderkit.generation.sampling import draw
from decoderkit.generation.lm.complete import generate
from decoderkit.nn.lm.model import DecoderOnlyLM, LMConfig

V, C = 13, 10


def tiny(seed: int = 0, **overrides) -> DecoderOnlyLM:
    """A float64 LM at its own (GPT-2) initialisation: near-uniform logits whose argmax any
    error in the computation would change (randomised norms make random models repeat one
    token)."""
    torch.manual_seed(seed)
    config = LMConfig(**dict(vocab_size=V, n_layers=2, d_model=8, n_heads=2, d_ff=16,
                             max_len=C, dropout=0.0) | overrides)
    return DecoderOnlyLM(config).double().eval()


def recompute(model, prompt, n, seed=None):
    """nanoGPT's loop: the full forward on the last C tokens every step, no cache; greedy, or
    drawn as ``generate`` draws (``decoding.draw``) with a generator seeded ``seed``."""
    seq, gens = list(prompt), [torch.Generator().manual_seed(seed)] if seed is not None else None
    with torch.no_grad():
        for _ in range(n):
            logits = model(torch.tensor([seq[-C:]]))[:, -1]  # (1, V)
            seq.append(int(logits.argmax() if gens is None else draw(logits, gens, 1.0, 0, 1.0)))
    return seq[len(prompt):]


@pytest.mark.parametrize("overrides", [dict(), dict(norm_first=False, positions="sinusoidal")])
def test_cached_generation_equals_recomputation_within_the_context(overrides):
    model = tiny(**overrides)
    prompt = [1, 2, 3]
    assert generate(model, [prompt], max_new_tokens=C - 3, greedy=True) == \
        [recompute(model, prompt, C - 3)]
    sampled = generate(model, [prompt], max_new_tokens=C - 3, seed=4)
    assert sampled == [recompute(model, prompt, C - 3, seed=4)]
    assert len(set(sampled[0])) > 2  # varied tokens: a broken cache would show


def test_beyond_the_context_the_window_slides_as_nanogpts():
    model = tiny(2, tie_head=False)  # a window one token short would change these tokens
    prompt = [4, 5, 6, 7, 8, 9, 10]
    for seed in (None, 3, 4):  # 7 + 12 > C = 10
        assert generate(model, [prompt], max_new_tokens=12, seed=seed, greedy=seed is None) \
            == [recompute(model, prompt, 12, seed)]
    long = list(range(1, 13)) + [1, 2]  # 14 > C tokens: the last C are seen
    assert generate(model, [long], max_new_tokens=3, greedy=True) == \
        generate(model, [long[-C:]], max_new_tokens=3, greedy=True)


def test_batched_prompts_of_different_lengths_equal_each_alone():
    model = tiny(2)
    prompts = [[1, 2, 3, 4, 5, 6], [7], [8, 9, 3]]
    batched = generate(model, prompts, max_new_tokens=8, greedy=True)  # crosses C for row 0
    assert batched == [generate(model, [p], max_new_tokens=8, greedy=True)[0] for p in prompts]
    sampled = generate(model, prompts, max_new_tokens=8, seed=[5, 6, 7], top_k=5)
    assert sampled == [generate(model, [p], max_new_tokens=8, seed=s, top_k=5)[0]
                       for p, s in zip(prompts, [5, 6, 7], strict=True)]


def test_sampling_is_seeded_and_filters_apply():
    model = tiny(3)
    prompts = [[1, 2], [3, 4]]
    a = generate(model, prompts, max_new_tokens=6, seed=11, temperature=2.0)
    assert a == generate(model, prompts, max_new_tokens=6, seed=11, temperature=2.0)
    assert a != generate(model, prompts, max_new_tokens=6, seed=12, temperature=2.0)
    greedy = generate(model, prompts, max_new_tokens=6, greedy=True)
    assert generate(model, prompts, max_new_tokens=6, seed=1, top_k=1) == greedy
    assert generate(model, prompts, max_new_tokens=6, seed=1, top_p=1e-9) == greedy


def test_streaming_callback_sees_every_token_in_order():
    model = tiny()
    seen = []
    out = generate(model, [[1], [2, 3]], max_new_tokens=5, greedy=True,
                   on_step=lambda step, tokens: seen.append((step, tokens)))
    assert [s for s, _ in seen] == list(range(5))
    assert [[t[b] for _, t in seen] for b in range(2)] == out


@pytest.mark.parametrize("prompts, kwargs, message", [
    ([], {}, "prompts must be a non-empty list"),
    ([[1], []], {}, "prompt 1 must be a non-empty list"),
    ([[1, V]], {}, f"prompt 0, position 1: token id {V} is outside the vocabulary"),
    ([[1]], dict(max_new_tokens=0), "max_new_tokens must be an integer >= 1"),
    ([[1]], dict(temperature=0.0), "temperature must be"),
    ([[1]], dict(top_p=1.5), "top_p must be"),
    ([[1]], dict(seed=[1, 2]), "one int per source row"),
    ([[1]], dict(greedy=1), "greedy must be a bool"),
])
def test_bad_arguments_refused(prompts, kwargs, message):
    with pytest.raises(UsageError, match=message):
        generate(tiny(), prompts, **(dict(max_new_tokens=2) | kwargs))


def test_not_an_lm_refused():
    with pytest.raises(TypeError, match="DecoderOnlyLM"):
        generate(torch.nn.Linear(2, 2), [[1]], max_new_tokens=1)
