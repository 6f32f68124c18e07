"""int8 inference copies: int8 linears (but the sliced cross-attention in_proj), same search."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from decoderkit import make_model
from decoderkit.base.errors import UsageError
from decoderkit.generation.decoding import greedy_decode
from decoderkit.generation.int8 import int8_available, quantize_int8
from decoderkit.generation.packing import prepack
from decoderkit.generation.search import beam_search
from decoderkit.generation.translate import DecodeOptions, translate_lines

pytestmark = pytest.mark.skipif(not int8_available(), reason="no fbgemm int8 engine")


def small_model(seed: int = 0):
    torch.manual_seed(seed)
    return make_model(40, 40, N=2, d_model=32, d_ff=64, h=4, dropout=0.0).eval()


def test_every_linear_but_cross_in_proj_is_int8_and_the_model_is_unchanged():
    model = small_model()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    q = quantize_int8(model)
    int8 = torch.ao.nn.quantized.dynamic.Linear
    floats = sorted(name for name, m in q.named_modules() if type(m) is nn.Linear)
    assert floats == [f"decoder.layers.{i}.cross_attn.in_proj" for i in range(2)]
    n_int8 = sum(type(m) is int8 for m in q.modules())
    assert n_int8 == 2 * 4 + 2 * 5 + 1  # encoder layers, decoder layers, generator
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)


def test_int8_linear_is_the_dequantized_product():
    """y = quantize(x) W_q^T + b: a float64 NumPy re-derivation from the stored int8 weight,
    its per-row scales and the activation's per-call scale (per-tensor, asymmetric, over
    0..127: fbgemm's dynamic quantization keeps one bit spare, ``reduce_range``)."""
    q = quantize_int8(small_model())
    lin = q.decoder.layers[0].ffn.w_1
    w = lin.weight()  # per-channel qint8
    w_int = w.int_repr().numpy().astype(np.float64)
    scales = w.q_per_channel_scales().numpy()[:, None]
    x = torch.randn(5, 32, generator=torch.Generator().manual_seed(1))
    xn = x.numpy().astype(np.float64)
    lo, hi = min(xn.min(), 0.0), max(xn.max(), 0.0)
    a_scale = (hi - lo) / 127
    zero = np.clip(np.round(-lo / a_scale), 0, 127)
    xq = (np.clip(np.round(xn / a_scale) + zero, 0, 127) - zero) * a_scale
    ref = xq @ (w_int * scales).T + lin.bias().detach().numpy()
    with torch.inference_mode():
        out = lin(x).numpy()
    assert np.abs(out - ref).max() < 1e-4 * np.abs(ref).max()


def test_int8_decoding_stays_close_to_float32():
    model = small_model()
    q = quantize_int8(model)
    src = torch.randint(4, 40, (6, 9), generator=torch.Generator().manual_seed(2))
    full = greedy_decode(model, src, None, max_len=8)
    int8 = greedy_decode(q, src, None, max_len=8)
    assert (full.tokens[:, 0] == int8.tokens[:, 0]).float().mean() >= 0.8
    beam = beam_search(q, src, None, beam_size=4, max_len=8)  # same search code, int8 model
    assert beam.tokens.shape[0] == 6 and bool((beam.lengths >= 1).all())


def test_translate_int8_and_refusals(tmp_path):
    from conftest import tiny_checkpoint

    from decoderkit.training.checkpoint import load_checkpoint

    ckpt = load_checkpoint(tiny_checkpoint(tmp_path / "ckpt"))
    out = translate_lines(ckpt, ["12 Nov", "3"], DecodeOptions(int8=True, max_len=6))
    assert len(out) == 2 and all(r.stop_reason in ("eos", "max_len") for r in out)
    with pytest.raises(UsageError, match="prepack"):
        quantize_int8(prepack(small_model()))
