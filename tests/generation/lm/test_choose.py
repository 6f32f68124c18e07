"""generation.lm.choose: the rows' next tokens at once. The adjusted logits against a float64
NumPy computation of OpenAI's bias and penalties; a row's choice among 15 companions (greedy,
alike, other settings) equals its choice alone, bit for bit, step after step."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from decoderkit.base.errors import UsageError
from decoderkit.generation.sampling import generators
from decoderkit.generation.lm.choose import adjusted_logits, choose, usable_vocab
from decoderkit.generation.lm.row import Settings

V = 40


def test_bias_and_penalties_as_openai_documents():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, V, generator=g)
    counts = [None, torch.tensor([0.0, 2.0, 1.0] + [0.0] * (V - 3)), None]
    settings = [Settings(4, logit_bias=((5, 2.5), (7, -100.0))),
                Settings(4, presence_penalty=0.5, frequency_penalty=0.25, logit_bias=((1, 1.0),)),
                Settings(4)]
    got = adjusted_logits(logits, settings, counts).double().numpy()
    want = logits.double().numpy().copy()
    want[0, 5] += 2.5
    want[0, 7] -= 100.0
    want[1, 1] += 1.0
    c = counts[1].double().numpy()
    want[1] -= 0.25 * c + 0.5 * (c > 0)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)
    assert adjusted_logits(logits, [Settings(4)] * 3, [None] * 3) is logits  # nothing to add


def test_a_rows_choice_among_15_companions_is_its_choice_alone():
    """The target row is drawn in one group with companions of its settings, beside greedy,
    penalised and otherwise-set rows; over 30 steps its ids equal choosing it by itself."""
    target = Settings(40, temperature=0.8, top_k=12, top_p=0.9, seed=7)
    company = [Settings(40, temperature=0.8, top_k=12, top_p=0.9, seed=20 + i) for i in range(6)]
    company += [Settings(40, greedy=True, logit_bias=((3, 4.0),))] * 4
    company += [Settings(40, temperature=1.3, presence_penalty=0.4, seed=40 + i)
                for i in range(5)]
    settings = company[:8] + [target] + company[8:]
    gens = [None if s.greedy else generators(s.seed, 1, torch.device("cpu")) for s in settings]
    alone_gens = generators(target.seed, 1, torch.device("cpu"))
    counts = [torch.zeros(V) if s.presence_penalty else None for s in settings]
    g = torch.Generator().manual_seed(1)
    together, alone = [], []
    for _ in range(30):
        logits = torch.randn(len(settings), V, generator=g) * 3
        ids = choose(logits, settings, gens, counts)
        for b, token in enumerate(ids):
            if counts[b] is not None:
                counts[b][token] += 1
        together.append(ids[8])
        alone.append(choose(logits[8:9].clone(), [target], [alone_gens], [None])[0])
    assert together == alone
    assert len(set(alone)) > 3  # varied draws: a row fed another row's number would show


def test_ids_past_a_rows_usable_vocab_are_never_chosen():
    """Padded rows (ids at or past ``usable_vocab``) are -inf before the bias, penalties and
    filters: rigged to lead every row by 50, they are never the argmax nor drawn; a row
    without a limit still takes them, and the others' ids are those of the first columns."""
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(4, V, generator=g)
    logits[:, 30:] += 50.0  # the padding leads everywhere
    settings = [Settings(4, greedy=True, usable_vocab=30),
                Settings(4, temperature=1.5, top_k=35, seed=1, usable_vocab=30,
                         presence_penalty=-3.0),
                Settings(4, temperature=0.7, top_p=0.99, seed=2, usable_vocab=25),
                Settings(4, greedy=True)]
    counts = [None, torch.ones(V), None, None]
    adjusted = adjusted_logits(logits, settings, counts)
    assert torch.isneginf(adjusted[0, 30:]).all() and torch.isneginf(adjusted[2, 25:]).all()
    assert torch.isfinite(adjusted[0, :30]).all() and torch.isfinite(adjusted[3]).all()
    gens = [None if s.greedy else generators(s.seed, 1, torch.device("cpu")) for s in settings]
    drawn = [choose(logits, settings, gens, counts) for _ in range(50)]
    assert all(ids[0] == int(logits[0, :30].argmax()) for ids in drawn)
    assert all(ids[1] < 30 and ids[2] < 25 and ids[3] >= 30 for ids in drawn)
    assert len({ids[1] for ids in drawn}) > 3  # draws, not one stuck id


def test_usable_vocab_is_the_model_rows_within_the_tokenizers():
    assert usable_vocab(151_936, 151_665) == 151_665  # Qwen2.5
    assert usable_vocab(50_304, 50_257) == 50_257  # nanoGPT's padded GPT-2
    assert usable_vocab(50_257, None) == 50_257  # no tokenizer: every row
    with pytest.raises(UsageError, match="logit_bias token id must be"):
        Settings(4, logit_bias=((30, 1.0),), usable_vocab=30)
