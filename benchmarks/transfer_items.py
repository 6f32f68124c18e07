"""The held-out items of benchmarks/transfer.py and their scores: test passages grouped into
items of ``--windows`` consecutive passages of one play (class probabilities averaged over an
item's passages), accuracy, macro-F1 and accuracy per play."""

from __future__ import annotations

import dataclasses
import sys

import torch

from decoderkit.training.lm.genres import TEST_PLAYS, play_passages
from decoderkit.training.lm.labelled import Labelled, macro_f1
from decoderkit.training.lm.shakespeare import fetch_works


def picks(n: int, limit: int | None) -> list[int]:
    """``limit`` evenly spaced indices of ``range(n)`` (all when None or more)."""
    return list(range(n)) if limit is None or n <= limit else \
        [int(k * n / limit) for k in range(limit)]


def subset(data: Labelled, chosen: list[int]) -> Labelled:
    """The examples of ``data`` at ``chosen``."""
    return Labelled([data.texts[i] for i in chosen], [data.labels[i] for i in chosen], data.file)


def plays_of(test: Labelled, sdist: str | None) -> list[str]:
    """The held-out play of each passage of the whole ``test.tsv`` (rebuilt from the sdist:
    the file holds the test plays' passages in name order)."""
    chars = len(test.texts[0][0])
    cut = play_passages(fetch_works(sdist), chars)
    plays = [stem for stem in sorted(TEST_PLAYS) for _ in cut[stem]]
    if [p for stem in sorted(TEST_PLAYS) for p in cut[stem]] != [t[0] for t in test.texts]:
        sys.exit(f"{test.file} is not the test plays' passages of {chars} characters")
    return plays


def scores(predicted: list[int], targets: list[int], plays: list[str], classes: int) -> dict:
    """Accuracy, macro-F1 over the classes, accuracy per play and its mean over the plays."""
    right = [p == t for p, t in zip(predicted, targets, strict=True)]
    per_play = {stem: sum(r for r, q in zip(right, plays, strict=True) if q == stem) /
                plays.count(stem) for stem in sorted(set(plays))}
    return {"accuracy": sum(right) / len(right), "macro_f1": macro_f1(predicted, targets, classes),
            "plays": per_play, "play_mean": sum(per_play.values()) / len(per_play)}


@dataclasses.dataclass(frozen=True)
class Held:
    """What is scored: ``texts`` every test passage, ``plays`` each one's play, and ``items``:
    for each ``--windows`` K, the items of K consecutive passages of one play (their indices
    into ``texts``)."""

    texts: Labelled
    plays: list[str]
    items: dict[int, list[list[int]]]

    def score(self, k: int, probs: torch.Tensor, labels: tuple[str, ...]) -> dict:
        """``scores`` of the K-passage items' class probabilities (items, C) over ``labels``."""
        groups = self.items[k]
        targets = [labels.index(self.texts.labels[g[0]]) for g in groups]
        return scores(probs.argmax(-1).tolist(), targets, [self.plays[g[0]] for g in groups],
                      len(labels))

    def pooled(self, probs: torch.Tensor, labels: tuple[str, ...]) -> dict[int, dict]:
        """K -> ``score`` of every passage's class probabilities (N, C) averaged over each
        item's K passages."""
        return {k: self.score(k, torch.stack([probs[g].mean(0) for g in groups]), labels)
                for k, groups in self.items.items()}

    def joined(self, k: int) -> list[str]:
        """The text of each K-passage item: its passages joined by spaces."""
        return [" ".join(self.texts.texts[i][0] for i in g) for g in self.items[k]]


def held_out(test: Labelled, plays: list[str], windows: list[int], limit: int | None) -> Held:
    """For each K of ``windows``, ``limit`` evenly spaced items of K consecutive ``test``
    passages of one play (a play's last passages that make no whole item are left out)."""
    items = {}
    for k in windows:
        groups, run = [], []
        for i, play in enumerate(plays):
            run = run if run and plays[run[0]] == play else []
            run.append(i)
            if len(run) == k:
                groups.append(run)
                run = []
        items[k] = [groups[i] for i in picks(len(groups), limit)]
    return Held(test, plays, items)
