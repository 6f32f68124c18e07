"""The non-block references against independent ones: the library's sinusoidal table and
warm-up rate, PyTorch's KL divergence; decode-loop expectations against a hand-run loop."""

import math

import numpy as np
import torch

from decoderkit.grade.reference import pieces
from decoderkit.grade.run.child.scripted import scripted_next
from decoderkit.nn.embeddings import sinusoidal_encoding
from decoderkit.training.objective import noam_rate


def test_positional_table_is_the_formula_and_mistakes_differ():
    ref = pieces.positional_table(20, 8)
    pos, i = np.arange(20)[:, None], np.arange(4)[None, :]
    angle = pos / 10000 ** (2 * i / 8)  # independent float64 NumPy re-derivation
    np.testing.assert_allclose(ref[:, 0::2].numpy(), np.sin(angle), atol=1e-15)
    np.testing.assert_allclose(ref[:, 1::2].numpy(), np.cos(angle), atol=1e-15)
    torch.testing.assert_close(ref, sinusoidal_encoding(20, 8, torch.float64))
    for m in ("pe_swapped", "pe_not_interleaved", "pe_frequency"):
        assert not torch.allclose(ref, pieces.positional_table(20, 8, m))


def test_rate_is_the_library_schedule():
    for step in (1, 10, 4000, 9000):
        assert math.isclose(pieces.rate(step, 512, 2.0, 4000), noam_rate(step, 512, 4000, 2.0),
                            rel_tol=1e-12)
    assert pieces.rate(0, 512, 1.0, 4000) == pieces.rate(1, 512, 1.0, 4000)  # AT: step 0 -> 1


def test_label_smoothing_is_kl_divergence_against_the_v_minus_2_target():
    g = torch.Generator().manual_seed(0)
    x = torch.log_softmax(torch.randn(4, 6, generator=g, dtype=torch.float64), -1)
    target = torch.tensor([2, 0, 5, 1])
    dist, loss = pieces.at_label_smoothing(x, target, 0, 0.3)
    assert torch.allclose(dist[0], torch.tensor([0, 0.075, 0.7, 0.075, 0.075, 0.075],
                                                dtype=torch.float64))
    assert dist[1].abs().sum() == 0  # a padding row
    kl = torch.nn.KLDivLoss(reduction="sum")(x, dist)
    torch.testing.assert_close(loss, kl)
    for m in ("ls_over_v", "ls_over_v_minus_1", "ls_pad_kept"):
        assert not torch.allclose(dist, pieces.at_label_smoothing(x, target, 0, 0.3, m)[0])


def test_decode_tokens_follow_the_scripted_model():
    ids = [1]
    while len(ids) < 9:
        ids.append(scripted_next(ids, 20, 4))
        if ids[-1] == 2:
            break
    assert ids == pieces.decode_tokens(1, 8, 20, 4, True) and ids[-1] == 2 and len(ids) == 5
    assert pieces.decode_tokens(1, 8, 20, 4, True, "decode_drops_last") == ids[:-1]
    assert len(pieces.decode_tokens(1, 8, 20, 4, True, "decode_ignores_eos")) == 9
    assert pieces.decode_tokens(1, 5, 11, 0, False)[1:] != \
        pieces.decode_tokens(1, 5, 11, 0, False, "decode_last_token_only")[1:]
