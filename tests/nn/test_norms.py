"""RMSNorm (nn.norms) against PyTorch's own and float64 NumPy."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from decoderkit.nn.norms import RMSNorm, make_norm


def test_rms_norm_equals_numpy_and_torch():
    norm = RMSNorm(6, eps=1e-5).double()
    with torch.no_grad():
        norm.weight.copy_(torch.randn(6))
    x = torch.randn(3, 4, 6, dtype=torch.float64)
    a = x.numpy()
    want = a / np.sqrt((a ** 2).mean(-1, keepdims=True) + 1e-5) * norm.weight.detach().numpy()
    np.testing.assert_allclose(norm(x).detach().numpy(), want, rtol=1e-12)
    peer = nn.RMSNorm(6, eps=1e-5, dtype=torch.float64)
    with torch.no_grad():
        peer.weight.copy_(norm.weight)
    torch.testing.assert_close(norm(x), peer(x))
    assert sum(p.numel() for p in norm.parameters()) == 6  # a scale, no shift


def test_rms_norm_of_bfloat16_is_computed_in_float32():
    x = torch.randn(2, 64) * 30
    norm = make_norm("rms", 64, eps=1e-6)
    got = norm.to(torch.bfloat16)(x.to(torch.bfloat16))
    assert got.dtype == torch.bfloat16
    want = norm.float()(x.to(torch.bfloat16).float()).to(torch.bfloat16)
    assert torch.equal(got, want)
