"""generation.lm.compiled: the LM's step compiled by torch.compile gives the eager step's
logits (within float32 rounding) and tokens, as rows join and leave (one row, several, a key
window that grows); refused for another model, changed weights, a prepacked copy."""

from __future__ import annotations

import copy
import re

import pytest
import torch

from decoderkit.base.errors import UsageError
from decoderkit.generation.lm.compiled import compile_decoding
from decoderkit.generation.lm.row import Row, Settings
from decoderkit.generation.lm.rows import Rows
from decoderkit.generation.lm.rowwise import for_inference
from decoderkit.nn.lm.model import DecoderOnlyLM, LMConfig
from decoderkit.nn.rowwise import rowwise

LLAMA = dict(vocab_size=61, n_layers=2, d_model=32, n_heads=4, n_kv_heads=2, d_ff=64,
             max_len=96, dropout=0.0, positions="rope", activation="swish", bias=False,
             norm="rms", ffn="gated")


def llama(seed: int = 0) -> DecoderOnlyLM:
    """A tiny random Llama-block LM, its matrices 4x the initialisation's (decided tokens)."""
    torch.manual_seed(seed)
    model = DecoderOnlyLM(LMConfig(**LLAMA)).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(4.0 if p.dim() > 1 else 1.0)
    return model


def lockstep(eager: DecoderOnlyLM, compiled: DecoderOnlyLM, prompts, budgets) -> int:
    """The same rows through both engines step by step (rows leave at their budgets): every
    running row's next-token logits agree within 1e-4 while the tokens agree; returns the
    steps compared."""
    engines = [Rows(eager), Rows(compiled)]
    for rows in engines:
        for prompt, n in zip(prompts, budgets, strict=True):
            rows.join(Row(list(prompt), Settings(n, greedy=True)))
    steps = 0
    while engines[0].running:
        events = [rows.step() for rows in engines]
        assert [t.id for _, t in events[0]] == [t.id for _, t in events[1]]
        for a, b in zip(engines[0].running, engines[1].running, strict=True):
            torch.testing.assert_close(b.next_logits, a.next_logits, atol=1e-4, rtol=1e-4)
        steps += 1
    assert not engines[1].running
    return steps


def test_compiled_steps_match_eager_as_rows_join_and_leave():
    model = llama()
    compiled = compile_decoding(copy.deepcopy(model))
    # three rows, then two, then one; the longest passes a key-window boundary (16 positions)
    prompts = [[1, 2, 3, 4, 5] * 10, [7, 8, 9], [11] * 20]
    steps = lockstep(rowwise(model), compiled, prompts, budgets=[40, 6, 12])
    assert steps == 40


def test_compiled_rows_give_their_tokens_alone_as_together():
    model = compile_decoding(llama(1))
    prompt = [3, 1, 4, 1, 5, 9, 2, 6]
    alone, together = Rows(model), Rows(model)
    row = Row(prompt, Settings(10, greedy=True))
    alone.join(row)
    rows = [Row(prompt, Settings(10, greedy=True)), Row([2, 7, 1, 8], Settings(10, greedy=True))]
    for r in rows:
        together.join(r)
    for engine in (alone, together):
        while engine.running:
            engine.step()
    assert rows[0].tokens == row.tokens and len(row.tokens) == 10


def test_compiled_refusals():
    model = llama()
    compiled = compile_decoding(copy.deepcopy(model))
    with pytest.raises(UsageError, match="prepacked"):
        compile_decoding(rowwise(model))
    with pytest.raises(UsageError, match="--autotune needs --compile"):
        for_inference(model, autotune=True)
    rows = Rows(compiled)
    rows.join(Row([1, 2, 3], Settings(3, greedy=True)))
    rows.step()
    with torch.no_grad():
        compiled.embed.lut.weight.add_(1.0)  # an update after compiling froze the weights
    with pytest.raises(UsageError, match="weights changed"):
        rows.step()


def test_int8_and_compile_together_are_refused():
    with pytest.raises(UsageError, match="--int8 with --compile"):
        for_inference(llama(), int8=True, compile=True)


def test_no_cpp_compiler_is_refused_in_one_line(monkeypatch):
    from torch._inductor import config

    monkeypatch.delenv("CXX", raising=False)
    # config.patch, not monkeypatch: undoing a monkeypatch deletes the config entry, and every
    # later compile in the process failed on it
    with config.patch({"cpp.cxx": ("no-such-compiler-x",)}), \
            pytest.raises(UsageError, match="--compile needs a C\\+\\+ compiler"):
        compile_decoding(llama())
    assert config.cpp.cxx != ("no-such-compiler-x",)


def loop_bounds(code: str) -> list[int]:
    """The constant trip counts of the C++ loops in Inductor's generated code."""
    return [int(n) for n in re.findall(r"<static_cast<int64_t>\((\d+)L\);", code)]


def test_the_compiled_step_writes_the_cache_in_place():
    from torch._inductor import config
    from torch._inductor.utils import run_and_get_code

    model = compile_decoding(llama(2))
    cache = model.new_cache(1, LLAMA["max_len"], rowwise=True)
    ids, keys = torch.tensor([[5]]), cache.keys[0]
    with torch.no_grad():
        model.forward(torch.tensor([[3, 1, 4]]), cache, cache.packed([0], [3]))
        twin = copy.deepcopy(cache)  # its own at(): it zeroes the window's unfilled positions
        expect = model.forward(ids, twin, twin.at(torch.tensor([[3]])))[:, 0]
        with config.patch(fx_graph_cache=False):  # generated here, not loaded
            logits, codes = run_and_get_code(model.decode_one_token, ids, cache,
                                             cache.at(torch.tensor([[3]])))
    torch.testing.assert_close(logits, expect, atol=1e-4, rtol=1e-4)
    assert cache.keys[0] is keys and keys.data_ptr() == cache.keys[0].data_ptr()
    # one layer's keys or values of the buffer (16 slots, 2 heads, 96 positions, 8 wide): the
    # step writes one position of each; a loop over as many elements copies the cache
    layer = keys[0].numel()
    bounds = [n for code in codes for n in loop_bounds(code)]
    assert bounds and max(bounds) < layer, (max(bounds), layer)
