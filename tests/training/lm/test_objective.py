"""The LM objective: loss = summed cross-entropy re-derived in float64, AdamW decays exactly the
matrices, the warm-up/cosine rate, held-out loss and perplexity."""

import math

import numpy as np
import pytest
import torch

from decoderkit.base.errors import UsageError
from decoderkit.nn.lm.model import DecoderOnlyLM, LMConfig
from decoderkit.training.lm.objective import (
    NextToken,
    evaluate_lm,
    make_adamw,
    warmup_cosine,
)


@pytest.fixture
def model():
    torch.manual_seed(0)
    return DecoderOnlyLM(LMConfig(vocab_size=11, n_layers=1, d_model=8, n_heads=2, d_ff=16,
                                  max_len=8, dropout=0.0)).double()


def test_next_token_loss_is_the_summed_negative_log_likelihood(model):
    ids, labels = torch.randint(11, (3, 5)), torch.randint(11, (3, 5))
    logits = model(ids).detach().numpy()  # (B, T, V)
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    expected = -sum(logp[b, t, labels[b, t]] for b in range(3) for t in range(5))
    assert float(NextToken(model)(ids, labels).detach()) == pytest.approx(expected, rel=1e-12)


def test_adamw_decays_matrices_only(model):
    optimizer, _ = make_adamw(model, lr=1e-3, min_lr=1e-4, warmup=2, total=10,
                              weight_decay=0.1, betas=(0.9, 0.99))
    decayed, plain = optimizer.param_groups
    assert decayed["weight_decay"] == 0.1 and plain["weight_decay"] == 0.0
    assert all(p.dim() >= 2 for p in decayed["params"]) and \
        all(p.dim() < 2 for p in plain["params"])
    counted = sum(p.numel() for g in optimizer.param_groups for p in g["params"])
    assert counted == sum(p.numel() for p in model.parameters())  # the tied head once
    assert any(p is model.embed.lut.weight for p in decayed["params"])
    with pytest.raises(UsageError, match="min_lr must be in"):
        make_adamw(model, lr=1e-3, min_lr=1e-2, warmup=2, total=10, weight_decay=0.1,
                   betas=(0.9, 0.99))


def test_warmup_then_cosine_to_the_floor():
    rates = [warmup_cosine(done, 4, 14, 0.1) for done in range(16)]
    assert rates[:4] == [0.25, 0.5, 0.75, 1.0]
    for done in range(4, 14):  # 0.1 + 0.9 * (1 + cos(pi r)) / 2, r = (done - 4) / 10
        assert rates[done] == pytest.approx(0.1 + 0.45 * (1 + math.cos(math.pi * (done - 4) / 10)))
    assert rates[14:] == [0.1, 0.1] and rates[9] == pytest.approx(0.55)
    optimizer, scheduler = make_adamw(torch.nn.Linear(2, 2), lr=2.0, min_lr=0.2, warmup=4,
                                      total=14, weight_decay=0.0, betas=(0.9, 0.99))
    seen = []
    for _ in range(6):
        seen.append(scheduler.get_last_lr()[0])
        optimizer.step()
        scheduler.step()
    assert seen == pytest.approx([2 * r for r in rates[:6]])


def test_evaluate_lm_is_the_mean_loss_and_its_exponential(model):
    blocks = [torch.randint(11, (6,)) for _ in range(5)]
    metrics = evaluate_lm(model, blocks, batch_size=2)
    with torch.no_grad():
        total = sum(float(NextToken(model)(b[None, :-1], b[None, 1:])) for b in blocks)
    assert metrics.tokens == 25 and metrics.loss == pytest.approx(total / 25, rel=1e-12)
    assert metrics.perplexity == pytest.approx(math.exp(metrics.loss))
    assert model.training  # the mode it had before


@pytest.mark.parametrize("loss,shown", [(1.0, f"{math.e:.2f}"), (20.0, "4.85e+08"),
                                        (1000.0, "inf"), (math.inf, "inf"), (math.nan, "nan")])
def test_a_diverged_runs_perplexity_is_a_value_not_an_overflow(loss, shown):
    from decoderkit.training.lm.objective import LMMetrics, perplexity

    metrics = LMMetrics(loss, perplexity(loss), 10)
    assert metrics.shown_perplexity == shown and shown in metrics.line()
