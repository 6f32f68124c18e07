"""Attention masks, one convention library-wide.

A mask is a boolean tensor where True = may attend, exactly as
``F.scaled_dot_product_attention`` reads it. Conversion to other conventions
happens only at the edges (``nn.MultiheadAttention``'s True = blocked, additive
float masks of 0 / -inf).

Legend: B batch, S source length, T target length.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.nn.utils.rnn import pad_sequence

from decoderkit.base.checks import count
from decoderkit.base.errors import UsageError


def check_ids(ids: Tensor, name: str = "ids") -> None:
    """TypeError unless an integer tensor; ValueError unless it is (B, L)."""
    if not isinstance(ids, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of token ids, got {type(ids).__name__}")
    if ids.dim() != 2:
        raise UsageError(f"{name} must have shape (B, L), got shape {tuple(ids.shape)}")
    if ids.dtype.is_floating_point or ids.dtype.is_complex or ids.dtype == torch.bool:
        raise TypeError(f"{name} must hold integer token ids, got dtype {ids.dtype}")


def causal_mask(size: int, device: torch.device | str | None = None) -> Tensor:
    """Lower-triangular visibility: query i may attend to keys j <= i.

    Returns a (size, size) bool tensor, True on and below the diagonal.
    """
    count(1).check("size", size)
    return torch.ones(size, size, dtype=torch.bool, device=device).tril()


def padding_mask(ids: Tensor, pad_id: int) -> Tensor:
    """Key-padding visibility for a batch of id sequences: True where ids != pad_id.

    ids (B, S) -> (B, 1, S); the middle axis broadcasts over query positions.
    """
    check_ids(ids)
    if not isinstance(pad_id, int) or isinstance(pad_id, bool):
        raise TypeError(f"pad_id must be an int, got {type(pad_id).__name__}")
    return (ids != pad_id).unsqueeze(1)  # (B, 1, S)


def target_mask(ids: Tensor, pad_id: int) -> Tensor:
    """Decoder self-attention visibility: padding AND causal.

    ids (B, T) -> (B, T, T) for decoder inputs [start, y1, ...]; row i of sequence b sees keys
    j <= i that are not padding. Position 0 is the decoder start token and always visible, even
    when its id is ``pad_id`` (Marian starts decoding with pad): hiding it would change every
    output, and would leave the first query no key at all.
    """
    pad = padding_mask(ids, pad_id)  # (B, 1, T)
    if ids.size(1):
        pad[:, :, 0] = True  # the start token
    return pad & causal_mask(ids.size(1), device=ids.device)  # (B, T, T)


def to_torch_mask(mask: Tensor) -> Tensor:
    """Our True = may attend -> ``nn.MultiheadAttention``'s True = blocked."""
    _check_bool(mask)
    return ~mask


def from_torch_mask(mask: Tensor) -> Tensor:
    """``nn.MultiheadAttention``-style mask -> ours (True = may attend).

    Accepts a bool mask (True = blocked) or an additive float mask (0 = visible,
    -inf = blocked; any value other than -inf counts as visible).
    """
    if not isinstance(mask, Tensor):
        raise TypeError(f"mask must be a torch.Tensor, got {type(mask).__name__}")
    if mask.dtype == torch.bool:
        return ~mask
    if mask.dtype.is_floating_point:
        return mask != float("-inf")
    raise TypeError(f"mask must be bool or floating point, got dtype {mask.dtype}")


def to_additive(mask: Tensor, dtype: torch.dtype = torch.float32) -> Tensor:
    """Bool mask (True = may attend) -> additive float mask: 0 where visible, -inf where not."""
    _check_bool(mask)
    out = torch.zeros(mask.shape, dtype=dtype, device=mask.device)
    return out.masked_fill(~mask, float("-inf"))


def check_mask(mask: Tensor, shape: tuple[int, ...]) -> None:
    """TypeError unless ``mask`` is a bool tensor; ValueError unless it broadcasts to ``shape``."""
    _check_bool(mask)
    if not broadcasts_to(tuple(mask.shape), tuple(shape)):
        raise UsageError(f"mask of shape {tuple(mask.shape)} does not broadcast to {tuple(shape)}")


def broadcasts_to(small: tuple[int, ...], shape: tuple[int, ...]) -> bool:
    """True when a tensor of shape ``small`` broadcasts to exactly ``shape``: no more
    dimensions, and each of its trailing sizes 1 or ``shape``'s. In plain Python:
    ``torch.broadcast_shapes`` imports sympy on its first call (about 35 MB resident, which a
    server's first forward would pay for a shape check)."""
    return len(small) <= len(shape) and all(
        m in (1, s) for m, s in zip(reversed(small), reversed(shape), strict=False))


def _check_bool(mask: Tensor) -> None:
    if not isinstance(mask, Tensor):
        raise TypeError(f"mask must be a torch.Tensor, got {type(mask).__name__}")
    if mask.dtype != torch.bool:
        raise TypeError(f"mask must be a bool tensor (True = may attend), got dtype {mask.dtype}")


def pad_ids(seqs: list[list[int]], pad_id: int) -> Tensor:
    """Id lists -> (B, L) long, L = the longest; shorter rows end in ``pad_id``."""
    rows = [torch.tensor(s, dtype=torch.long) for s in seqs]
    return pad_sequence(rows, batch_first=True, padding_value=pad_id)  # (B, L)


def visible(positions: Tensor, window: int) -> Tensor:
    """The mask of queries at ``positions`` (B or 1, T) over keys 0..window-1: (B or 1, T,
    window) bool, True where key j <= the query's position (a padding query, position < 0,
    sees none)."""
    return torch.arange(window, device=positions.device) <= positions[..., None]
