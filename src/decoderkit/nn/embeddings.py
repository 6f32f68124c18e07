"""Token embeddings, sinusoidal positions and the output generator.

Legend: B batch, L sequence length, d = d_model, V vocabulary size.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from decoderkit.base.checks import check_choice, count
from decoderkit.base.errors import UsageError
from decoderkit.nn.masks import check_ids


class TokenEmbedding(nn.Module):
    """Embedding lookup scaled by sqrt(d_model): ids (B, L) -> (B, L, d).

    ``scale=False``: the plain lookup (GPT-1, GPT-2, nanoGPT).
    """

    def __init__(self, vocab: int, d_model: int, scale: bool = True):
        super().__init__()
        self.lut = nn.Embedding(vocab, d_model)
        self.d_model = d_model
        self.scale = scale

    def forward(self, ids: Tensor) -> Tensor:
        """ids (B, L) -> embeddings (B, L, d), scaled by sqrt(d) if ``scale``."""
        check_ids(ids)
        vocab = self.lut.num_embeddings
        # a compiled decoding step (``generation.seq2seq.compiled``) skips this data-dependent
        # check: its ids are the previous step's argmax or draw, always inside the vocabulary
        if ids.numel() and not torch.compiler.is_compiling() \
                and (int(ids.min()) < 0 or int(ids.max()) >= vocab):
            bad = ids[(ids < 0) | (ids >= vocab)][0].item()
            raise UsageError(f"token id {bad} is outside the vocabulary [0, {vocab})")
        return self.lut(ids) * math.sqrt(self.d_model) if self.scale else self.lut(ids)


# where the sines and cosines of the table go, and (for "marian") their frequencies
POSITION_LAYOUTS = ("interleaved", "split", "marian")


def check_sinusoidal_width(d_model: int) -> None:
    """The sinusoidal table pairs channels (sin, cos): d_model must be even."""
    if d_model % 2:
        raise UsageError(f"d_model must be even for sinusoidal positions, got {d_model}")


def sinusoidal_encoding(max_len: int, d_model: int, dtype: torch.dtype = torch.float32,
                        layout: str = "interleaved") -> Tensor:
    """PE(p, 2i) = sin(p w_i), PE(p, 2i+1) = cos(p w_i), w_i = 10000^(-2i/d) ("interleaved",
    the paper); "split" puts the same values as PE(p, i) = sin(p w_i), PE(p, d/2 + i) =
    cos(p w_i) (Hugging Face's Marian, fairseq): one fixed permutation of the channels;
    "marian" is "split" with Marian's own frequencies w_i = 10000^(-i/(d/2 - 1)) (its C++
    ``sinusoidalPositionEmbeddings``, tensor2tensor's timing signal; needs d >= 4).

    Returns (max_len, d_model), computed in float64 and cast to ``dtype``.
    """
    count(1).check("max_len", max_len)
    count(2).check("d_model", d_model)
    check_sinusoidal_width(d_model)
    check_choice("layout", layout, POSITION_LAYOUTS)
    if layout == "marian" and d_model < 4:
        raise UsageError(f"the \"marian\" layout needs d_model >= 4, got {d_model}")
    pos = torch.arange(max_len, dtype=torch.float64)[:, None]  # (L, 1)
    if layout == "marian":
        omega = 10000.0 ** (-torch.arange(d_model // 2, dtype=torch.float64)
                            / (d_model // 2 - 1))  # (d/2,)
    else:
        omega = 10000.0 ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    sin, cos = torch.sin(pos * omega), torch.cos(pos * omega)  # (L, d/2) each
    if layout in ("split", "marian"):
        return torch.cat([sin, cos], dim=1).to(dtype)  # (L, d)
    pe = torch.empty(max_len, d_model, dtype=torch.float64)
    pe[:, 0::2] = sin
    pe[:, 1::2] = cos
    return pe.to(dtype)


class PositionalEncoding(nn.Module):
    """x + PE[offset : offset + L], then dropout. The table is a buffer, not a parameter.

    Like parameters, the table is built in torch's default dtype: build under float64 for an
    exact float64 table (``.double()`` afterwards only widens the float32-rounded values).
    """

    def __init__(self, d_model: int, dropout: float = 0.0, max_len: int = 5000,
                 layout: str = "interleaved"):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        table = sinusoidal_encoding(max_len, d_model, torch.get_default_dtype(), layout)
        self.register_buffer("pe", table)  # (max_len, d)

    def forward(self, x: Tensor, offset: int | Tensor = 0) -> Tensor:
        """x (B, L, d); ``offset`` is the first position (incremental decoding), or a (B, L)
        long tensor of each position (left-padded rows of a decoder-only LM)."""
        if isinstance(offset, Tensor):
            return self.dropout(x + self.pe[check_positions(offset, self.pe.size(0))].to(x.dtype))
        end = offset + x.size(1)
        if end > self.pe.size(0):
            raise UsageError(f"position {end - 1} exceeds max_len {self.pe.size(0)}")
        return self.dropout(x + self.pe[offset:end].to(x.dtype))


def check_positions(positions: Tensor, max_len: int) -> Tensor:
    """``positions`` (B, L) long, unless one is outside [0, max_len): then a UsageError."""
    if positions.numel() and not torch.compiler.is_compiling() \
            and (int(positions.min()) < 0 or int(positions.max()) >= max_len):
        raise UsageError(f"position {int(positions.max())} exceeds max_len {max_len}")
    return positions


class LearnedPositionalEmbedding(nn.Module):
    """x + P[position], then dropout; P (max_len, d) a trained table (GPT-1, GPT-2's ``wpe``)."""

    def __init__(self, d_model: int, dropout: float = 0.0, max_len: int = 1024):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.table = nn.Embedding(max_len, d_model)  # (max_len, d)

    def forward(self, x: Tensor, offset: int | Tensor = 0) -> Tensor:
        """x (B, L, d); ``offset`` the first position, or a (B, L) tensor of positions."""
        n = self.table.num_embeddings
        if not isinstance(offset, Tensor):
            offset = torch.arange(offset, offset + x.size(1), device=x.device)[None]  # (1, L)
        return self.dropout(x + self.table(check_positions(offset, n)))


class Generator(nn.Module):
    """Decoder features (B, T, d) -> log-probabilities over the vocabulary (B, T, V)."""

    def __init__(self, d_model: int, vocab: int, bias: bool = True):
        super().__init__()
        self.proj = nn.Linear(d_model, vocab, bias=bias)

    def logits(self, x: Tensor) -> Tensor:
        """x (B, T, d) -> unnormalised scores (B, T, V), what a fused loss takes."""
        return self.proj(x)

    def forward(self, x: Tensor) -> Tensor:
        """x (B, T, d) -> log-probabilities (B, T, V)."""
        return F.log_softmax(self.logits(x), dim=-1)
