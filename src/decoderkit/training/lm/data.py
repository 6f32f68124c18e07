"""A language model's data: text files as token streams, the held-out split, contiguous blocks.

Each file is read as UTF-8 and split by characters: its last 10% (``held_out_at``) is held out
for validation (as nanoGPT's ``prepare.py`` splits its one file). Training draws random
contiguous windows of ``block_size + 1`` tokens (inputs and their next tokens) from the
training parts, never across two files, in an order fixed by (seed, micro-batch index), so a
resumed run sees the same batches. Validation reads the held-out parts as consecutive
non-overlapping blocks.

Legend: B batch, T block size (the model's context in training).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from decoderkit.base.errors import UsageError
from decoderkit.base.text import read_text
from decoderkit.text.lm.tokenizer import LMTokenizer

HELD_OUT = 0.1  # the fraction at the end of each file kept for validation


def held_out_at(text: str) -> int:
    """Where ``text``'s held-out part begins (characters): its last 10%."""
    return int(len(text) * (1 - HELD_OUT))


@dataclass
class LMBatch:
    """Inputs and their next tokens; ``n_tokens`` counts the predicted tokens."""

    ids: Tensor  # (B, T) input ids
    labels: Tensor  # (B, T) the token after each input
    n_tokens: int  # B * T

    @property
    def inputs(self) -> tuple[Tensor, Tensor]:
        """What the objective's forward takes."""
        return self.ids, self.labels

    def to(self, device: torch.device | str) -> LMBatch:
        """The batch on ``device``."""
        return LMBatch(self.ids.to(device), self.labels.to(device), self.n_tokens)


@dataclass
class LMData:
    """Token streams of every file's training and held-out parts."""

    tokenizer: LMTokenizer
    train: list[Tensor]  # one (n,) int64 stream per file
    valid: list[Tensor]
    files: list[str]  # the files, in order

    @property
    def train_tokens(self) -> int:
        """Tokens in the training parts."""
        return sum(len(t) for t in self.train)


def load_text(files: list[str | Path], block_size: int, *, tokenizer: LMTokenizer | None = None,
              kind: str = "char", vocab_size: int = 0) -> LMData:
    """Read, split and encode ``files``; the tokenizer is ``tokenizer`` (a resumed run's), else
    a character vocabulary of all the text, else (``kind`` "bpe") byte-level BPE of
    ``vocab_size`` learned from the training parts. Every part must hold at least
    ``block_size + 1`` tokens."""
    if not files:
        raise UsageError("give at least one text file")
    texts = [read_text(f) for f in files]
    parts = [(t[:held_out_at(t)], t[held_out_at(t):]) for t in texts]
    if tokenizer is None:
        tokenizer = (LMTokenizer.characters("".join(texts)) if kind == "char"
                     else LMTokenizer.train_bpe([p for p, _ in parts], vocab_size))
    train, valid = [], []
    for file, (head, tail) in zip(files, parts, strict=True):
        try:
            streams = [torch.tensor(tokenizer.encode(p), dtype=torch.long) for p in (head, tail)]
        except UsageError as err:
            raise UsageError(f"{file}: {err}") from None
        for what, stream in zip(("training part (first 90%)", "held-out part (last 10%)"),
                                streams, strict=True):
            if len(stream) < block_size + 1:
                raise UsageError(f"{file}: its {what} is {len(stream)} tokens, fewer than "
                                 f"block size + 1 = {block_size + 1}; give a longer text or a "
                                 "smaller --block-size")
        train.append(streams[0])
        valid.append(streams[1])
    return LMData(tokenizer, train, valid, [str(f) for f in files])


def random_batch(streams: list[Tensor], batch_size: int, block_size: int, seed: int,
                 index: int) -> LMBatch:
    """Micro-batch number ``index``: ``batch_size`` windows at uniformly random start positions
    over all streams (a file weighs by its length), drawn from a generator seeded by
    (``seed``, ``index``) alone."""
    starts = torch.tensor([len(s) - block_size for s in streams])  # (files,) starts per file
    ends = starts.cumsum(0)
    g = torch.Generator().manual_seed(seed * 1_000_003 + index)
    picks = torch.randint(int(ends[-1]), (batch_size,), generator=g)  # (B,)
    which = torch.searchsorted(ends, picks, right=True)  # (B,) the file of each pick
    offsets = picks - (ends[which] - starts[which])  # (B,) start inside that file
    windows = torch.stack([streams[f][o: o + block_size + 1]
                           for f, o in zip(which.tolist(), offsets.tolist(), strict=True)])
    return LMBatch(windows[:, :-1], windows[:, 1:], batch_size * block_size)  # (B, T) each


def eval_blocks(streams: list[Tensor], block_size: int, limit: int | None = None
                ) -> list[Tensor]:
    """The held-out streams cut into consecutive non-overlapping windows of ``block_size + 1``
    tokens (the window's last token is the next one's first); with ``limit``, that many
    evenly spaced among them. Each (block_size + 1,)."""
    blocks = [s[i: i + block_size + 1] for s in streams
              for i in range(0, len(s) - block_size, block_size)]
    if limit is not None and len(blocks) > limit:
        step = len(blocks) / limit
        blocks = [blocks[int(k * step)] for k in range(limit)]
    return blocks
