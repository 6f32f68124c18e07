"""TeacherForced: the encoder-decoder's summed loss is F.cross_entropy's over the real target
tokens (PyTorch's label smoothing, the paper's uniform convention); a criterion that does not
sum is refused (train_step divides by the step's real tokens itself)."""

import pytest
import torch
import torch.nn.functional as F

from decoderkit import make_model
from decoderkit.training.objective import LabelSmoothingLoss
from decoderkit.training.seq2seq.data import make_batch
from decoderkit.training.seq2seq.objective import TeacherForced


def test_the_loss_is_cross_entropys_sum_over_real_tokens():
    torch.manual_seed(0)
    model = make_model(11, 13, N=1, d_model=16, d_ff=32, h=2, dropout=0.0, max_len=32).eval()
    batch = make_batch([([3, 4, 5], [6, 7]), ([8, 9], [10, 11, 12, 3])], 0, 1, 2)
    loss = TeacherForced(model, LabelSmoothingLoss(0.1, ignore_index=0, reduction="sum"))(
        *batch.inputs)
    logits = model.generator.proj(model(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask))
    want = F.cross_entropy(logits.flatten(0, 1), batch.labels.flatten(), ignore_index=0,
                           label_smoothing=0.1, reduction="sum")
    assert loss.item() == pytest.approx(want.item(), rel=1e-5)
    with pytest.raises(ValueError, match="reduction='sum'"):
        TeacherForced(model, LabelSmoothingLoss(0.1))
