"""What every stored tensor passes before a model holds it (``nn.weights``' pipeline): a tensor
of one of ``WEIGHT_DTYPES`` (float8: refused), finite, of the shape the config's model expects;
and the copy of a stored tensor into its place in the model a block of rows at a time
(``copy_blocks``: each block checked, then written into the model's own storage), so that
opening a model holds the model and one block, not a tensor beside it. Every refusal is one
``UsageError``: ``FILE: tensor 'NAME' ...``, NAME as the file spells it.
"""

from __future__ import annotations

from pathlib import Path

import torch

from decoderkit.base.errors import UsageError
from decoderkit.nn.stored import DTYPES, StoredTensors

WEIGHT_DTYPES = tuple(DTYPES.values())  # what a weight may be stored as (float8: refused)


def check_tensor(file: Path, name: str, value: object) -> torch.Tensor:
    """``value`` (the file's ``name``) if it is a floating-point tensor with no NaN or inf."""
    check_kind(file, name, value)
    nonfinite(file, name, int((~torch.isfinite(value)).sum()))
    return value


def check_kind(file: Path, name: str, value: object) -> None:
    """``value`` (the file's ``name``, or a block of it) must be a tensor of a weight dtype."""
    if not isinstance(value, torch.Tensor):
        raise UsageError(f"{file}: tensor {name!r} is a {type(value).__name__}, not a tensor")
    if value.dtype not in WEIGHT_DTYPES:  # float8 too: its scales are its quantizer's
        kind = f"one of {WEIGHT_DTYPES}" if value.is_floating_point() else "floating point"
        raise UsageError(f"{file}: tensor {name!r} is {value.dtype}, not {kind}")


def nonfinite(file: Path, name: str, bad: int) -> None:
    """The refusal of the file's tensor ``name`` holding ``bad`` NaN or inf values, if any."""
    if bad:
        raise UsageError(f"{file}: tensor {name!r} holds {bad} non-finite value(s) (NaN or "
                         "inf): a diverged or damaged checkpoint")


def check_shape(file: Path, name: str, shape: tuple[int, ...], want: tuple[int, ...],
                source: str) -> None:
    """The file's tensor ``name`` must have the shape ``want`` of the model ``source`` (the
    config file, in words) describes."""
    if tuple(shape) != tuple(want):
        raise UsageError(f"{file}: tensor {name!r} has shape {tuple(shape)}, but {source} "
                         f"gives a model expecting {tuple(want)} (weights from another config?)")


def copy_blocks(file: Path, tensors: StoredTensors, plan: list[tuple[str, tuple]],
                into: torch.Tensor, source: str) -> None:
    """Each part of ``plan`` ((the file's name, the shape ``source`` gives it), their rows one
    after another, as ``torch.cat``) copied into its rows of ``into`` a block at a time
    (``StoredTensors.blocks``): its shape checked from the header first, each block's type and
    values as it comes (the non-finite ones counted over the whole tensor)."""
    at = 0
    for name, want in plan:
        check_shape(file, name, tensors.header[name][1], want, source)
        bad = 0
        for block in tensors.blocks(name):
            check_kind(file, name, block)
            bad += int((~torch.isfinite(block)).sum())
            with torch.no_grad():  # cast to the model's dtype as it is written
                into[at:at + len(block)].copy_(block.reshape(-1, *into.shape[1:]))
            at += len(block)
        nonfinite(file, name, bad)
    if at != len(into):  # a bug in the format's NameMap
        raise RuntimeError(f"{at} rows copied into a tensor of {tuple(into.shape)}")
