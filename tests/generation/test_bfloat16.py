"""generation.bfloat16: bfloat16 weights, and int8 weights with bfloat16 activations, give
logits within LOGIT_BOUND of float32's (eager and compiled) and float32's greedy tokens wherever
float32's margin exceeds twice that bound; refused in one line on a CPU without bfloat16."""

from __future__ import annotations

import copy

import pytest
import torch

from decoderkit.base.errors import UsageError
from decoderkit.generation.bfloat16 import LOGIT_BOUND, Int8WeightOnlyLinear, check_native_bf16
from decoderkit.generation.lm.complete import generate
from decoderkit.generation.lm.row import Row, Settings
from decoderkit.generation.lm.rows import Rows
from decoderkit.generation.lm.rowwise import for_inference
from decoderkit.nn.lm.model import DecoderOnlyLM, LMConfig

LLAMA = dict(vocab_size=97, n_layers=2, d_model=64, n_heads=4, n_kv_heads=2, d_ff=128,
             max_len=96, dropout=0.0, positions="rope", activation="swish", bias=False,
             norm="rms", ffn="gated", tie_head=True)


@pytest.fixture(autouse=True)
def native(monkeypatch):
    """Run everywhere: a CPU without bfloat16 instructions emulates it (slower, same sums)."""
    monkeypatch.setattr("decoderkit.generation.bfloat16.native_bf16", lambda: True)


def llama(seed: int = 0, **changes) -> DecoderOnlyLM:
    """A tiny random Llama-block LM, its matrices 4x the initialisation's (decided tokens)."""
    torch.manual_seed(seed)
    model = DecoderOnlyLM(LMConfig(**{**LLAMA, **changes})).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(4.0 if p.dim() > 1 else 1.0)
    return model


def within_bound(got: torch.Tensor, want: torch.Tensor, kind: str) -> None:
    """|got - want| <= LOGIT_BOUND[kind] (1 + max |want|), and got is float32."""
    assert got.dtype == torch.float32
    bound = LOGIT_BOUND[kind] * (1 + want.abs().max().item())
    err = (got - want).abs().max().item()
    assert err <= bound, f"{kind}: {err} > {bound}"
    assert err > 0  # rounded: the bound is what holds, not equality


@pytest.mark.parametrize("int8", [False, True])
def test_logits_within_the_bound_and_greedy_choices_under_the_margin_rule(int8):
    model = llama()
    ids = torch.randint(97, (1, 80), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = model(ids)[0]
        got = for_inference(copy.deepcopy(model), int8=int8, dtype=torch.bfloat16)(ids)[0]
    kind = "int8" if int8 else "bfloat16"
    within_bound(got, want, kind)
    top = want.topk(2).values
    decided = (top[:, 0] - top[:, 1]) > 2 * LOGIT_BOUND[kind] * (1 + want.abs().max())
    assert decided.sum() >= 10, decided.sum()  # enough places to compare
    assert torch.equal(got.argmax(-1)[decided], want.argmax(-1)[decided])


def test_the_copy_holds_bfloat16_or_int8_weights_and_float32_rope():
    model = for_inference(llama(), int8=True, dtype=torch.bfloat16)
    linears = [m for m in model.modules() if isinstance(m, Int8WeightOnlyLinear)]
    assert len(linears) == 2 * 5 + 1  # in_proj, out_proj, w_1..w_3 per block; the tied head
    assert all(m.weight_int8.dtype == torch.int8 for m in linears)
    assert model.embed.lut.weight.dtype == torch.bfloat16
    assert model.rotary.inv_freq.dtype == torch.float32


def test_rows_decode_a_bfloat16_model_with_float32_logits():
    model = for_inference(llama(), dtype=torch.bfloat16)
    rows, logits = Rows(model), []
    row = Row([3, 1, 4, 1, 5], Settings(6, greedy=True, logprobs=2))
    rows.join(row)
    while rows.running:
        rows.step()
        if row.next_logits is not None:
            logits.append(row.next_logits)
    assert logits and all(t.dtype == torch.float32 for t in logits) and len(row.tokens) == 6
    assert generate(model, [[3, 1, 4, 1, 5]], max_new_tokens=6, greedy=True)[0] == row.tokens


def test_compiled_bfloat16_int8_steps_within_the_bound_of_eager():
    from decoderkit.generation.compiling import check_compiler

    eager = for_inference(llama(2, n_layers=1), int8=True, dtype=torch.bfloat16)
    check_compiler(eager)
    compiled = for_inference(llama(2, n_layers=1), int8=True, compile=True, dtype=torch.bfloat16)
    engines = [Rows(eager), Rows(compiled)]
    rows = [Row([3, 1, 4, 1, 5] * 4, Settings(8, greedy=True)) for _ in engines]
    for engine, row in zip(engines, rows, strict=True):
        engine.join(row)
    for _ in range(7):
        for engine in engines:
            engine.step()
        within_bound(rows[1].next_logits, rows[0].next_logits, "bfloat16")
        rows[1].tokens[-1] = rows[0].tokens[-1]  # the same next input, whatever the margin


def test_refused_in_one_line_without_native_bfloat16(monkeypatch):
    monkeypatch.setattr("decoderkit.generation.bfloat16.native_bf16", lambda: False)
    with pytest.raises(UsageError, match="--dtype bfloat16 needs a CPU with native bfloat16"):
        check_native_bf16(torch.bfloat16)
    with pytest.raises(UsageError, match="avx512_bf16"):
        for_inference(llama(), dtype=torch.bfloat16)
    check_native_bf16(torch.float32)
