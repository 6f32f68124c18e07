"""Running a model in a mode for a while: ``evaluating`` (no dropout), for any model."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from torch import nn


@contextmanager
def evaluating(model: nn.Module) -> Iterator[nn.Module]:
    """Eval mode (no dropout) inside the block; the model's previous mode after it."""
    was_training = model.training
    model.eval()
    try:
        yield model
    finally:
        model.train(was_training)
