"""Validation: teacher-forced loss and token accuracy, and greedy translations scored by
exact match, BLEU and chrF (``sacrebleu``).

Legend: B batch, T target length, V target vocabulary.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import sacrebleu
import torch

from decoderkit.base.checks import count
from decoderkit.base.errors import UsageError
from decoderkit.generation.seq2seq.decoding import greedy_decode
from decoderkit.generation.seq2seq.bounds import default_max_len
from decoderkit.nn.modes import evaluating
from decoderkit.nn.seq2seq.model import EncoderDecoder
from decoderkit.training.seq2seq.data import Pair, make_batch
from decoderkit.training.objective import LabelSmoothingLoss
from decoderkit.text.seq2seq.tokenizer import Tokenizer


@dataclass(frozen=True)
class Metrics:
    """Held-out scores; fractions in [0, 1], BLEU and chrF on sacrebleu's 0-100 scale."""

    loss: float  # mean negative log-likelihood per real target token (no smoothing)
    token_accuracy: float  # teacher-forced argmax == label, over real target tokens
    exact_match: float  # greedy translation == reference, per sentence
    bleu: float  # corpus BLEU of the greedy translations
    chrf: float  # corpus chrF of the greedy translations

    def as_dict(self) -> dict:
        """Field name -> value (one entry of a run's validation history)."""
        return asdict(self)

    def line(self) -> str:
        """The scores on one line for logs, fractions shown as percentages."""
        return (f"loss {self.loss:.4f} | token acc {100 * self.token_accuracy:.2f}% | "
                f"exact {100 * self.exact_match:.2f}% | BLEU {self.bleu:.1f} | "
                f"chrF {self.chrf:.1f}")


def evaluate(model: EncoderDecoder, pairs: list[Pair], references: list[str],
             tgt_tokenizer: Tokenizer, *, batch_size: int, max_len: int | None = None,
             ) -> tuple[Metrics, list[str]]:
    """Score ``model`` on id ``pairs`` whose target texts are ``references``.

    Returns the metrics and the greedy translation of every pair (in the given order), each
    at most ``max_len`` tokens (None: ``default_max_len`` of its own source).
    """
    count().check("batch_size", batch_size)
    if len(pairs) != len(references) or not pairs:
        raise UsageError(f"need as many references as pairs (>= 1), got {len(references)} "
                         f"references for {len(pairs)} pairs")
    c = model.config
    device = next(model.parameters()).device
    nll = LabelSmoothingLoss(0.0, ignore_index=c.pad_id, reduction="sum")
    order = sorted(range(len(pairs)), key=lambda i: len(pairs[i][0]))  # less padding
    hyps: list[str] = [""] * len(pairs)
    total_nll, correct, tokens = 0.0, 0, 0
    with evaluating(model), torch.no_grad():
        for start in range(0, len(order), batch_size):
            rows = order[start: start + batch_size]
            batch = make_batch([pairs[i] for i in rows], c.pad_id, c.bos_id, c.eos_id,
                               c.source_pad_id).to(device)
            logp = model.generator(model(batch.src, batch.tgt_in, batch.src_mask,
                                         batch.tgt_mask))  # (B, T, V)
            flat, labels = logp.flatten(0, 1), batch.labels.flatten()  # (B*T, V), (B*T,)
            total_nll += float(nll(flat, labels))
            real = labels != c.pad_id
            correct += int(((flat.argmax(-1) == labels) & real).sum())
            tokens += batch.n_tokens
            limits = [max_len or default_max_len(len(pairs[i][0]), c.max_len) for i in rows]
            out = greedy_decode(model, batch.src, batch.src_mask, max_len=limits)
            for i, ids in zip(rows, out.tokens.tolist(), strict=True):
                hyps[i] = tgt_tokenizer.decode(ids)
    metrics = Metrics(total_nll / tokens, correct / tokens, *text_scores(hyps, references))
    return metrics, hyps


def text_scores(hyps: list[str], references: list[str]) -> tuple[float, float, float]:
    """(exact match fraction, corpus BLEU, corpus chrF) of translations against references."""
    if len(hyps) != len(references) or not hyps:
        raise UsageError(f"need as many translations as references (>= 1), got {len(hyps)} "
                         f"and {len(references)}")
    exact = sum(h == r for h, r in zip(hyps, references, strict=True)) / len(hyps)
    return (exact, sacrebleu.corpus_bleu(hyps, [references]).score,
            sacrebleu.corpus_chrf(hyps, [references]).score)
