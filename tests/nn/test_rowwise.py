"""nn.rowwise: each output row the same whatever rows share the call (the property
continuous batching's determinism rests on), and the same product as nn.Linear."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from decoderkit.nn.lm.model import DecoderOnlyLM, LMConfig
from decoderkit.nn.packing import kernel_rows
from decoderkit.nn.rowwise import RowwiseLinear, rowwise, rowwise_available

pytestmark = pytest.mark.skipif(not rowwise_available(nn.Linear(1, 1)),
                                reason="needs oneDNN's prepacked linear")


@pytest.mark.engines
@pytest.mark.parametrize("shape", [(96, 32), (200, 64), (64, 256), (768, 3072)])
def test_every_row_is_computed_alike_for_any_row_count(shape):
    """(out, in); 3,072 -> 768 is GPT-2's FFN down-projection, where an AVX-512 CPU's 1-row
    kernel on the blocked layout rounds differently from its 2+-row one."""
    torch.manual_seed(0)
    linear = nn.Linear(shape[1], shape[0])
    fast = RowwiseLinear(linear)
    x = torch.randn(33, shape[1])
    with torch.inference_mode():
        alone = torch.cat([fast(x[r:r + 1]) for r in range(33)])
        for rows in (2, 3, 8, 16, 17, 33):
            assert torch.equal(fast(x[:rows]), alone[:rows])
        # the same product as float64's within float32 rounding of a length-K sum
        want = x.double() @ linear.weight.double().T + linear.bias.double()
        assert float((alone.double() - want).abs().max()) <= 1e-5 * shape[1] ** 0.5


def test_row_counts_share_a_bounded_set_of_kernels_and_padding_changes_no_row():
    counts = {kernel_rows(n) for n in range(1, 1025)}  # every prefill length of a 1,024 context
    assert len(counts) == 35 and all(k >= 2 for k in counts)
    assert all(n <= kernel_rows(n) <= max(2, n + n // 4) for n in range(1, 5000))
    torch.manual_seed(0)
    fast = RowwiseLinear(nn.Linear(32, 48))
    x = torch.randn(150, 32)
    with torch.inference_mode():
        alone = torch.cat([fast(x[r:r + 1]) for r in range(150)])
        for rows in (64, 65, 100, 128, 129, 150):
            assert torch.equal(fast(x[:rows]), alone[:rows])


def test_the_copy_shares_the_other_parameters_and_leaves_the_model_alone():
    torch.manual_seed(0)
    model = DecoderOnlyLM(LMConfig(vocab_size=20, n_layers=1, d_model=8, n_heads=2, d_ff=16,
                                   max_len=8, dropout=0.0))
    copy = rowwise(model)
    assert copy is not model and copy.embed.lut.weight is model.embed.lut.weight
    assert type(copy.generator.proj) is RowwiseLinear and type(model.generator.proj) is nn.Linear
    ids = torch.tensor([[1, 2, 3]])
    with torch.inference_mode():
        assert float((copy(ids) - model(ids)).abs().max()) <= 1e-5
    with pytest.raises(RuntimeError, match="inference-only"):
        copy(ids)
    assert rowwise(model.double()) is model  # float64: the model itself


@pytest.mark.engines
def test_a_tied_head_reads_the_embedding_itself_and_is_still_row_invariant():
    """No reordered second copy of a weight another module holds (GPT-2's tied head: 147 MiB):
    oneDNN on the plain weight, a lone row beside a zero row; every row alike for any count."""
    torch.manual_seed(0)
    model = DecoderOnlyLM(LMConfig(vocab_size=300, n_layers=1, d_model=64, n_heads=2,
                                   d_ff=64, max_len=8, dropout=0.0))
    head = rowwise(model).generator.proj
    assert head.weight is model.embed.lut.weight and head.packed is None
    untied = rowwise(DecoderOnlyLM(LMConfig(vocab_size=300, n_layers=1, d_model=64, n_heads=2,
                                            d_ff=64, max_len=8, dropout=0.0, tie_head=False)))
    assert untied.generator.proj.packed is not None and untied.generator.proj.weight is None
    x = torch.randn(33, 64)
    with torch.inference_mode():
        alone = torch.cat([head(x[r:r + 1]) for r in range(33)])
        for rows in (2, 3, 8, 16, 17, 33):
            assert torch.equal(head(x[:rows]), alone[:rows])
        assert torch.equal(head(x[:3].reshape(3, 1, 64))[:, 0], alone[:3])
        want = x.double() @ model.embed.lut.weight.double().T
        assert float((alone.double() - want).abs().max()) <= 1e-5 * 64 ** 0.5


@pytest.mark.engines
@pytest.mark.parametrize("ffn,activation", [("gated", "swish"), ("mlp", "gelu_tanh")])
def test_the_feed_forward_activation_is_row_invariant_at_any_width(ffn, activation):
    """At an FFN width of 40 (no multiple of the vector loop's 16 or 32 floats) the plain
    activation computes a row's last 8 values by the loop's tail path whenever the rows before
    it leave it there, which rounds differently (F.silu, F.gelu tanh: seen on AVX-512 and
    AVX2); the copy's activation pads each row first, so every row is alike for any count."""
    torch.manual_seed(0)
    model = DecoderOnlyLM(LMConfig(vocab_size=20, n_layers=1, d_model=16, n_heads=2, d_ff=40,
                                   max_len=8, dropout=0.0, ffn=ffn, activation=activation,
                                   norm="rms", positions="rope", bias=False))
    twin = rowwise(model)
    plain = next(m for m in model.modules() if hasattr(m, "activation"))
    copied = next(m for m in twin.modules() if hasattr(m, "activation"))
    x = torch.randn(7, 40)
    with torch.inference_mode():
        for rows in range(1, 8):
            assert torch.equal(copied.activation(x[:rows]), copied.activation(x)[:rows])
        assert torch.allclose(copied.activation(x), plain.activation(x), atol=1e-6, rtol=0)
        if torch.backends.cpu.get_cpu_capability() != "DEFAULT":  # vector code: a tail path
            assert any(not torch.equal(plain.activation(x[:rows]), plain.activation(x)[:rows])
                       for rows in range(1, 8))
