"""Batches with the teacher-forcing shift, length-bucketed batching, and parallel corpora.

For a target sentence of tokens t1..tn the sequence y = t1..tn EOS is what the model must
produce (ending in EOS so it learns to stop):
decoder input [BOS, t1..tn] = [BOS, y1..y(T-1)], labels [t1..tn, EOS] = [y1..yT], T = n + 1.

Legend: B batch, S source length, T target length (after the shift).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from decoderkit.base.errors import UsageError
from decoderkit.base.text import read_lines
from decoderkit.nn.masks import pad_ids, padding_mask, target_mask

Pair = tuple[list[int], list[int]]  # (source ids, target ids), no BOS/EOS


@dataclass
class Batch:
    """One padded, shifted batch; ``n_tokens`` counts the real (non-pad) labels."""

    src: Tensor  # (B, S) source ids, padded with pad_id
    tgt_in: Tensor  # (B, T) decoder input [BOS, y1..y(T-1)]
    labels: Tensor  # (B, T) [y1..yT], pad_id after each sequence's EOS
    src_mask: Tensor  # (B, 1, S) True = real source token
    tgt_mask: Tensor  # (B, T, T) causal AND not padding
    n_tokens: int  # real label tokens (what the loss is normalised by)

    @property
    def inputs(self) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
        """What ``TeacherForced``'s forward takes."""
        return self.src, self.tgt_in, self.labels, self.src_mask, self.tgt_mask

    def to(self, device: torch.device | str) -> Batch:
        """A copy with every tensor moved to ``device`` (shapes unchanged, same ``n_tokens``)."""
        move = {k: v.to(device) for k, v in vars(self).items() if isinstance(v, Tensor)}
        return Batch(**move, n_tokens=self.n_tokens)


def make_batch(pairs: list[Pair], pad_id: int, bos_id: int, eos_id: int,
               src_pad_id: int | None = None) -> Batch:
    """Pad every sequence to the longest in ``pairs`` and apply the teacher-forcing shift;
    sources with ``src_pad_id`` (None: ``pad_id``, as ``ModelConfig.source_pad_id``).

    -> src (B, S), tgt_in and labels (B, T) with T = longest target + 1, and their masks.
    """
    if not pairs:
        raise UsageError("make_batch needs at least one (src, tgt) pair, got none")
    if max(len(s) for s, _ in pairs) == 0:
        raise UsageError("every source in the batch is empty; a source needs >= 1 token")
    src_pad = pad_id if src_pad_id is None else src_pad_id
    src = pad_ids([s for s, _ in pairs], src_pad)  # (B, S)
    tgt_in = pad_ids([[bos_id, *t] for _, t in pairs], pad_id)  # (B, T)
    labels = pad_ids([[*t, eos_id] for _, t in pairs], pad_id)  # (B, T)
    return Batch(src, tgt_in, labels, padding_mask(src, src_pad), target_mask(tgt_in, pad_id),
                 int((labels != pad_id).sum()))


def bucket_batches(lengths: list[int], batch_size: int, seed: int,
                   pool: int = 50) -> list[list[int]]:
    """Indices grouped into batches of similar length, in an order fixed by ``seed``.

    Shuffle, sort each pool of ``pool * batch_size`` examples by length, cut it into
    batches, then shuffle the batches: little padding, yet a fresh mix every seed (epoch).
    """
    if not isinstance(batch_size, int) or batch_size < 1:
        raise UsageError(f"batch_size must be a positive int, got {batch_size!r}")
    rng = random.Random(seed)
    order = list(range(len(lengths)))
    rng.shuffle(order)
    batches = []
    for start in range(0, len(order), pool * batch_size):
        chunk = sorted(order[start: start + pool * batch_size], key=lengths.__getitem__)
        batches += [chunk[i: i + batch_size] for i in range(0, len(chunk), batch_size)]
    rng.shuffle(batches)
    return batches


def shard(batches: list[list[int]], rank: int, world: int) -> list[list[int]]:
    """This process's share of the batches under data parallelism (equal count per rank)."""
    usable = len(batches) - len(batches) % world
    return batches[rank:usable:world]


def read_tsv(path: str | Path) -> list[tuple[str, str]]:
    """Lines 'source<TAB>target'; blank lines are skipped, anything else malformed is an error."""
    pairs = []
    for number, line in enumerate(read_lines(path), 1):
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) != 2:
            raise UsageError(f"{path}:{number}: " + ("no TAB between source and target"
                                                     if len(fields) == 1 else
                                                     f"{len(fields) - 1} TABs; a field may not "
                                                     "contain a TAB"))
        pairs.append(_checked_pair(*fields, f"{path}:{number}"))
    if not pairs:
        raise UsageError(f"{path}: empty corpus (no 'source<TAB>target' lines)")
    return pairs


def read_parallel(src_path: str | Path, tgt_path: str | Path) -> list[tuple[str, str]]:
    """Two line-aligned files: line i of ``src_path`` translates to line i of ``tgt_path``."""
    src_lines, tgt_lines = read_lines(src_path), read_lines(tgt_path)
    if len(src_lines) != len(tgt_lines):
        raise UsageError(f"{src_path} has {len(src_lines)} lines but {tgt_path} has "
                         f"{len(tgt_lines)}; they must be line-aligned")
    pairs = []
    for i, (s, t) in enumerate(zip(src_lines, tgt_lines, strict=True), 1):
        for path, text in ((src_path, s), (tgt_path, t)):
            if "\t" in text:
                raise UsageError(f"{path}:{i}: a TAB inside the sentence (not allowed: a "
                                 "corpus line must be writable as 'source<TAB>target')")
        if s.strip() or t.strip():
            pairs.append(_checked_pair(s, t, f"{src_path}:{i} / {tgt_path}:{i}"))
    if not pairs:
        raise UsageError(f"{src_path}: empty corpus")
    return pairs


def _checked_pair(src: str, tgt: str, where: str) -> tuple[str, str]:
    if not src.strip() or not tgt.strip():
        raise UsageError(f"{where}: empty {'source' if not src.strip() else 'target'}")
    return src, tgt


def split_held_out(pairs: list, n_valid: int, seed: int) -> tuple[list, list]:
    """(train, valid): ``n_valid`` examples chosen by ``seed``, the rest for training."""
    if not 0 < n_valid < len(pairs):
        raise UsageError(f"held-out size must be between 1 and {len(pairs) - 1} for "
                         f"{len(pairs)} pairs, got {n_valid}")
    order = list(range(len(pairs)))
    random.Random(seed).shuffle(order)
    held = set(order[:n_valid])
    return ([p for i, p in enumerate(pairs) if i not in held],
            [pairs[i] for i in order[:n_valid]])
