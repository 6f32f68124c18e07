"""The Llama family's block as LMConfig options: grouped-query attention against heads
repeated by hand, SwiGLU against its formula, the preset, the checks of the new fields."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F

from decoderkit.base.errors import UsageError
from decoderkit.nn.attention import MultiHeadAttention
from decoderkit.nn.ffn import GatedFeedForward
from decoderkit.nn.lm.model import DecoderOnlyLM, LMConfig
from decoderkit.nn.lm.presets import lm_preset
from decoderkit.report.params import count_parameters, lm_parameters, parameter_table


@pytest.mark.parametrize("n_kv", [1, 2, 6])
@pytest.mark.parametrize("queries", [1, 12])  # a step (reference path), a prompt (SDPA)
def test_grouped_query_attention_equals_each_key_value_head_repeated(n_kv, queries):
    """Query head i reads key/value head i // (h / h_kv): the same as a full-head attention
    whose k and v rows repeat each key/value head's h / h_kv times."""
    torch.manual_seed(0)
    gqa = MultiHeadAttention(24, 6, n_kv_heads=n_kv, head_dim=8, bias=False).double()
    full = MultiHeadAttention(24, 6, head_dim=8, bias=False).double()
    w = gqa.in_proj.weight.detach()
    q, k, v = w.split((48, 8 * n_kv, 8 * n_kv))
    repeat = 6 // n_kv
    with torch.no_grad():
        full.in_proj.weight.copy_(torch.cat([q] + [t.view(n_kv, 1, 8, 24).expand(
            n_kv, repeat, 8, 24).reshape(48, 24) for t in (k, v)]))
        full.out_proj.weight.copy_(gqa.out_proj.weight)
    x = torch.randn(2, queries, 24, dtype=torch.float64)
    mask = torch.ones(queries, queries, dtype=torch.bool).tril()
    want, want_w = full(x, mask=mask, need_weights=True)
    torch.testing.assert_close(gqa(x, mask=mask)[0], want)
    got, got_w = gqa(x, mask=mask, need_weights=True)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(got_w, want_w)


def test_gated_feed_forward_is_its_formula():
    ffn = GatedFeedForward(8, 12).double()
    x = torch.randn(3, 8, dtype=torch.float64)
    want = F.linear(F.silu(F.linear(x, ffn.w_1.weight, ffn.w_1.bias))
                    * F.linear(x, ffn.w_3.weight, ffn.w_3.bias), ffn.w_2.weight, ffn.w_2.bias)
    torch.testing.assert_close(ffn(x), want)


def test_the_llama_preset_is_the_llama_block_at_a_cpu_size():
    c = lm_preset("llama")
    model = DecoderOnlyLM(dataclasses.replace(c, vocab_size=2000))
    assert (c.positions, c.norm, c.ffn, c.kv_heads, c.bias) == ("rope", "rms", "gated", 2, False)
    n = count_parameters(model)
    assert n == lm_parameters(model.config) and n < 1_100_000  # trains on two cores
    assert "pos.table.weight" not in model.state_dict()  # no position table: RoPE
    table = parameter_table(model.config, "llama")
    assert "rope positions" in table and "2 key/value heads" in table and f"{n:,}" in table


@pytest.mark.parametrize("changes, message", [
    ({"n_kv_heads": 3}, "n_kv_heads must be a positive divisor of n_heads=4, got 3"),
    ({"n_kv_heads": 0}, "n_kv_heads must be a positive divisor"),
    ({"norm": "annotated"}, "norm must be one of"),
    ({"ffn": "moe"}, "ffn must be one of"),
    ({"rope_scaling": "yarn"}, "rope_scaling 'yarn' is not implemented"),
    ({"rope_theta": 0.0}, "rope_theta must be"),
    ({"head_dim": 7, "positions": "rope"}, "positions 'rope' needs an even head width, got 7"),
    ({"qkv_bias": 1}, "qkv_bias must be a bool"),
    ({"rope_low_freq_factor": 4.0}, "rope_low_freq_factor must be below"),
])
def test_the_new_fields_are_checked(changes, message):
    with pytest.raises(UsageError, match=message):
        dataclasses.replace(lm_preset("llama"), **changes)


def test_an_explicit_head_dim_frees_d_model_from_the_heads():
    c = LMConfig(vocab_size=10, n_layers=1, d_model=30, n_heads=4, head_dim=16, d_ff=8,
                 max_len=8, positions="rope")
    model = DecoderOnlyLM(c)
    assert model.blocks.layers[0].self_attn.in_proj.weight.shape == (3 * 64, 30)
    assert model(torch.zeros(1, 5, dtype=torch.long)).shape == (1, 5, 10)


def test_a_left_padded_row_is_rotated_from_its_first_real_token():
    """RoPE at each row's own positions: a left-padded row equals the row alone, prefilled and
    for a cached step (float64)."""
    torch.manual_seed(0)
    model = DecoderOnlyLM(dataclasses.replace(lm_preset("llama"), vocab_size=20, d_model=16,
                                              n_layers=2, d_ff=24, max_len=16)).double().eval()
    seq, short, pad = [3, 1, 4, 1, 5, 9, 2, 6], [2, 7, 1, 8, 2], 3
    with torch.no_grad():
        cache = model.new_cache(2, 10)
        positions = torch.tensor([list(range(8)), [-1] * pad + list(range(5))])  # -1: padding
        both = model(torch.tensor([seq, [0] * pad + short]), cache, cache.at(positions))
        step = model(torch.tensor([[4], [4]]), cache, cache.at(torch.tensor([[8], [5]])))[1, 0]
        alone = model(torch.tensor([short + [4]]))[0]
    assert (both[1, pad:] - alone[:-1]).abs().max() <= 1e-12
    assert (step - alone[-1]).abs().max() <= 1e-12
