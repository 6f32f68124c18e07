"""int8 inference copies: int8 linears (an LM's tied head its own int8 copy), same search
(the encoder-decoder's: tests/generation/seq2seq/test_int8.py)."""

from __future__ import annotations

import pytest
import torch
from conftest import assert_tokens_agree_where_decided, step_margins
from torch import nn

from decoderkit.base.errors import UsageError
from decoderkit.generation.int8 import (
    RowScaledInt8,
    int8_available,
    quantize_int8,
)
from decoderkit.nn.packing import prepack

pytestmark = pytest.mark.skipif(not int8_available(), reason="no fbgemm int8 engine")
# @pytest.mark.engines: a comparison of int8 with float32 or of a row alone with its batch,
# rerun under AVX2 by `make test` (the other tests check structure and refusals)


def small_lm(seed: int = 0, **overrides):
    """GPT-2-shaped at its own initialisation (tied head), float32, dropout off."""
    from decoderkit.nn.lm.model import DecoderOnlyLM, LMConfig

    torch.manual_seed(seed)
    config = LMConfig(**dict(vocab_size=50, n_layers=2, d_model=32, n_heads=4, d_ff=128,
                             max_len=32, dropout=0.0) | overrides)
    return DecoderOnlyLM(config).eval()


def test_an_lm_gets_int8_linears_its_own_int8_head_and_stays_unchanged():
    model = small_lm()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    q = quantize_int8(model)
    int8 = torch.ao.nn.quantized.dynamic.Linear
    assert not any(type(m) is nn.Linear for m in q.modules())  # no cross-attention to keep
    assert sum(type(m) is int8 for m in q.modules()) == 2 * 4 + 1  # 4 per block, the head
    assert type(q.generator.proj) is RowScaledInt8 and type(model.generator.proj) is nn.Linear
    # the tied head: its int8 copy is the embedding quantized per row; the lookup stays float
    w = q.generator.proj.weight().dequantize()
    assert torch.equal(q.embed.lut.weight, model.embed.lut.weight)
    scales = q.generator.proj.weight().q_per_channel_scales()[:, None].float()
    assert ((w - model.embed.lut.weight).abs() <= scales / 2 + 1e-7).all()
    assert model.generator.proj.weight is model.embed.lut.weight  # the float model still ties
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)


@pytest.mark.engines
def test_int8_lm_logits_and_greedy_tokens_stay_close_to_float32():
    """Logit error, relative to the float32 logits' standard deviation s: root mean square
    <= 0.04 s and max <= 0.15 s (measured 0.015-0.018 s and 0.058-0.069 s on seeds 0-3).
    Why that size: each int8 linear rounds its input to range/127 steps (reduce_range: 7 bits)
    and each weight row to max|w|/127, a ~1% relative error per product that adds up over the
    2 blocks' 4 products and the head; the max is the worst of 4,000 logits. A wrong quantized
    path (the head missing, a bias lost) is off by the logits' own size, as another seed's
    model is (rms ~1.25 s, checked below, so the bound can fail)."""
    from decoderkit.generation.lm.complete import generate

    model = small_lm()
    q = quantize_int8(model)
    ids = torch.randint(0, 50, (4, 20), generator=torch.Generator().manual_seed(3))
    with torch.inference_mode():
        ref, out, other = model(ids), q(ids), small_lm(seed=1)(ids)
    s = ref.std()
    assert (out - ref).pow(2).mean().sqrt() <= 0.04 * s and (out - ref).abs().max() <= 0.15 * s
    assert (other - ref).pow(2).mean().sqrt() > 0.04 * s
    prompts = ids[:, :8].tolist()
    full = generate(model, prompts, max_new_tokens=12, greedy=True)  # 4 rows of 12
    int8 = generate(q, prompts, max_new_tokens=12, greedy=True)
    with torch.inference_mode():  # the float model's next-token log-probs along its own tokens
        rows = torch.tensor([p + f for p, f in zip(prompts, full, strict=True)])
        logp = torch.log_softmax(model(rows), -1)
    margins = [step_margins(row.topk(2).values) for row in logp[:, 7:-1]]
    # a log-prob moves by at most twice its logits' max error (the logit's own and log-sum-exp's):
    # the first 3 tokens, where the float margins (the same on any CPU) decide them in 2 rows
    assert_tokens_agree_where_decided([f[:3] for f in full], [g[:3] for g in int8], margins,
                                      2 * 0.15 * float(s), at_least=2)


def test_quantize_refuses_what_is_not_a_model():
    with pytest.raises(TypeError, match="EncoderDecoder or a DecoderOnlyLM"):
        quantize_int8(nn.Linear(3, 3))
    with pytest.raises(UsageError, match="prepack"):
        quantize_int8(prepack(small_lm()))
