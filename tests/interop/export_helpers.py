"""Shared by the export tests: random small checkpoints and source lines."""

from __future__ import annotations

import random

import torch

from decoderkit import make_model
from decoderkit.training.seq2seq.checkpoint import load_checkpoint, save_checkpoint
from decoderkit.text.seq2seq.tokenizer import Tokenizer

CHARS = "0123456789 -/.NovDecabcdefghijklmnop"


def random_checkpoint(directory, *, norm_first: bool, tied: bool, eos_bias: float = 0.0,
                      seed: int = 0):
    """A random 2+2-layer model over characters, saved and loaded back as a Checkpoint.

    Pad, BOS and UNK get a generator bias of -1e4 (never chosen by any engine, whatever its
    rule for them; the text then shows every token); ``eos_bias`` moves EOS: high makes some
    lines stop early, -1e4 never.
    """
    tok = Tokenizer.characters([CHARS])
    torch.manual_seed(seed)
    model = make_model(tok.vocab_size, tok.vocab_size, N=2, d_model=32, d_ff=64, h=4,
                       dropout=0.0, max_len=96, norm_first=norm_first, tie_embeddings=tied,
                       tie_generator=tied)
    with torch.no_grad():
        for p in model.parameters():  # norms and biases away from their (1, 0) init
            if p.dim() == 1:
                p.add_(0.2 * torch.randn(p.shape))
        model.generator.proj.bias[[0, 1, 3]] = -1e4
        model.generator.proj.bias[2] += eos_bias
    save_checkpoint(directory, model, tok, tok, step=0)
    return load_checkpoint(directory)


def random_lines(n: int = 40, seed: int = 0) -> list[str]:
    """``n`` random lines of 1 to 20 characters (different lengths: padded batches)."""
    rng = random.Random(seed)
    return ["".join(rng.choice(CHARS) for _ in range(rng.randint(1, 20))) for _ in range(n)]
