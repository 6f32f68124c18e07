"""The encoder-decoder's training loss as one module: the model, its generator and the
label-smoothed criterion (``training.objective``) in one forward, teacher-forced.
"""

from __future__ import annotations

from torch import Tensor, nn

from decoderkit.base.errors import UsageError
from decoderkit.nn.seq2seq.model import EncoderDecoder
from decoderkit.training.objective import LabelSmoothingLoss


class TeacherForced(nn.Module):
    """Model, generator and criterion in one forward, so DistributedDataParallel sees them all.

    forward(a Batch's tensors) -> summed loss over the batch's real target tokens (scalar).
    """

    def __init__(self, model: EncoderDecoder, criterion: LabelSmoothingLoss):
        super().__init__()
        if criterion.reduction != "sum":
            raise UsageError(f"criterion must use reduction='sum', got {criterion.reduction!r}")
        self.model = model
        self.criterion = criterion

    def forward(self, src: Tensor, tgt_in: Tensor, labels: Tensor, src_mask: Tensor,
                tgt_mask: Tensor) -> Tensor:
        """src (B, S), tgt_in (B, T), labels (B, T), src_mask (B, 1, S), tgt_mask (B, T, T) ->
        sum of H(q, p) over the non-ignored labels, log p = generator(model(...)) (scalar)."""
        features = self.model(src, tgt_in, src_mask, tgt_mask)  # (B, T, d)
        logits = self.model.generator.logits(features)  # (B, T, V)
        return self.criterion.from_logits(logits.flatten(0, 1), labels.flatten())
