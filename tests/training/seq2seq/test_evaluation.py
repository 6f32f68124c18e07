"""Validation metrics against independent computations (F.cross_entropy, sacrebleu, decoding)."""

import random

import pytest
import sacrebleu
import torch
import torch.nn.functional as F

from decoderkit import make_model
from decoderkit.generation.seq2seq.decoding import greedy_decode
from decoderkit.training.seq2seq.data import make_batch
from decoderkit.training.seq2seq.evaluation import evaluate
from decoderkit.text.seq2seq.tokenizer import Tokenizer

TOK = Tokenizer.characters(["abcdefghij"])  # ids 4..13


@pytest.fixture()
def setup():
    torch.manual_seed(0)
    model = make_model(TOK.vocab_size, TOK.vocab_size, N=1, d_model=16, d_ff=32, h=2,
                       dropout=0.0, max_len=40).eval()
    rng = random.Random(0)
    pairs = [([rng.randrange(4, 14) for _ in range(rng.randint(1, 6))],
              [rng.randrange(4, 14) for _ in range(rng.randint(1, 6))]) for _ in range(9)]
    return model, pairs


def test_loss_and_token_accuracy_match_one_big_batch(setup):
    model, pairs = setup
    refs = [TOK.decode(t) for _, t in pairs]
    metrics, _ = evaluate(model, pairs, refs, TOK, batch_size=2, max_len=8)  # 5 sorted batches
    b = make_batch(pairs, 0, 1, 2)  # one batch, different padding
    with torch.no_grad():
        logits = model.generator.proj(model(b.src, b.tgt_in, b.src_mask, b.tgt_mask))
    flat, labels = logits.flatten(0, 1).double(), b.labels.flatten()
    assert metrics.loss == pytest.approx(F.cross_entropy(flat, labels, ignore_index=0).item(),
                                         rel=1e-5)
    real = labels != 0
    acc = ((flat.argmax(-1) == labels) & real).sum().item() / real.sum().item()
    assert metrics.token_accuracy == pytest.approx(acc)


def test_exact_match_bleu_chrf_of_greedy_translations(setup):
    model, pairs = setup
    b = make_batch(pairs, 0, 1, 2)
    out = greedy_decode(model, b.src, b.src_mask, max_len=8)
    own = [TOK.decode(row) for row in out.tokens.tolist()]
    metrics, hyps = evaluate(model, pairs, own, TOK, batch_size=4, max_len=8)
    assert hyps == own  # returned in the given order despite length sorting
    assert metrics.exact_match == 1.0
    wrong = ["x" + h for h in own[:4]] + own[4:]
    metrics, _ = evaluate(model, pairs, wrong, TOK, batch_size=4, max_len=8)
    assert metrics.exact_match == pytest.approx(5 / 9)
    assert metrics.bleu == pytest.approx(sacrebleu.corpus_bleu(own, [wrong]).score)
    assert metrics.chrf == pytest.approx(sacrebleu.corpus_chrf(own, [wrong]).score)
    assert "exact 55.56%" in metrics.line()


def test_mismatched_references(setup):
    model, pairs = setup
    with pytest.raises(ValueError, match="as many references as pairs"):
        evaluate(model, pairs, ["a"], TOK, batch_size=4, max_len=8)
    for bad in (0, -4, 2.0):  # was an empty loop and a ZeroDivisionError, or a TypeError
        with pytest.raises(ValueError, match="batch_size must be an integer >= 1"):
            evaluate(model, pairs, ["a"] * len(pairs), TOK, batch_size=bad, max_len=8)
