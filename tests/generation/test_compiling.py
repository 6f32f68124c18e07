"""generation.compiling: a later start compiles from PyTorch's caches in the directory given,
each model's weights under their own key (an autotuned graph stores the weights it packed), and
a directory that cannot hold them is refused in one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from decoderkit.base.errors import UsageError
from decoderkit.generation.compiling import (CACHE_ENV, default_compile_cache, use_compile_cache,
                                             weights_fingerprint)
from decoderkit.nn.lm.model import DecoderOnlyLM, LMConfig

SRC = str(Path(__file__).parents[2] / "src")
LLAMA = dict(vocab_size=61, n_layers=1, d_model=32, n_heads=4, n_kv_heads=2, d_ff=64, max_len=32,
             dropout=0.0, positions="rope", activation="swish", bias=False, norm="rms",
             ffn="gated")
# one process's compile: model `seed`, autotuned; prints its cache counters and whether the
# compiled step's logits are the eager model's
CHILD = """
import copy, json, sys, torch
from torch._dynamo.utils import counters
from decoderkit.generation.compiling import use_compile_cache
from decoderkit.generation.lm.compiled import compile_decoding
from decoderkit.generation.lm.row import Row, Settings
from decoderkit.generation.lm.rows import Rows
from decoderkit.nn.lm.model import DecoderOnlyLM, LMConfig
directory, seed, config = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
use_compile_cache(directory)
torch.manual_seed(seed)
model = DecoderOnlyLM(LMConfig(**config)).eval()
engines = [Rows(copy.deepcopy(model)), Rows(compile_decoding(model, autotune=True))]
rows = [Row([3, 1, 4, 1, 5], Settings(3, greedy=True)) for _ in engines]
for engine, row in zip(engines, rows):
    engine.join(row)
    engine.step()  # the prefill's logits: eager in both
    engine.step()  # the compiled step's
want, got = (row.next_logits for row in rows)
print(json.dumps({"close": torch.allclose(got, want, atol=1e-5, rtol=1e-4),
                  "hits": counters["inductor"]["fxgraph_cache_hit"],
                  "misses": counters["inductor"]["fxgraph_cache_miss"],
                  "bypasses": counters["inductor"]["fxgraph_cache_bypass"]}))
"""


# the environment `make demo` (and a run held to AVX2) sets: Inductor then generates AVX2 code
AVX2_HELD = {"ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2",
             "ATEN_CPU_CAPABILITY": "avx2"}
TAG_CHILD = """
import torch
from decoderkit.generation.compiling import compile_tag
print(compile_tag(torch.nn.Linear(2, 2)))
"""


def in_a_process(code: str, *args: str, held: bool = False) -> str:
    env = {**os.environ, "PYTHONPATH": SRC, **(AVX2_HELD if held else {})}
    if not held:
        for name in AVX2_HELD:
            env.pop(name, None)
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          timeout=600, env=env, check=True)
    return done.stdout.strip().splitlines()[-1]


def compile_in_a_process(directory: Path, seed: int, held: bool = False) -> dict:
    return json.loads(in_a_process(CHILD, str(directory), str(seed), json.dumps(LLAMA),
                                   held=held))


def vector_isas() -> tuple[str, str]:
    """compile_tag's ISA part unheld and held to AVX2, each in its own process (Inductor reads
    $ATEN_CPU_CAPABILITY once)."""
    return tuple(in_a_process(TAG_CHILD, held=held).rsplit("-", 1)[1] for held in (False, True))


def test_a_second_start_compiles_from_the_cache_and_another_models_weights_do_not(tmp_path):
    pytest.importorskip("torch._inductor.cpp_builder")
    from decoderkit.generation.compiling import check_compiler

    check_compiler(DecoderOnlyLM(LMConfig(**LLAMA)))  # a machine without g++ skips below
    directory = tmp_path / "cache"
    first = compile_in_a_process(directory, seed=0)
    assert first["close"] and first["misses"] > 0 and not first["bypasses"], first
    # the same shape, other weights: its own graph (the key is tagged by the weights), its
    # own logits, although a cached autotuned graph holds the weights it packed
    other = compile_in_a_process(directory, seed=1)
    assert other["close"] and other["misses"] > 0 and not other["hits"], other
    again = compile_in_a_process(directory, seed=0)
    assert again["close"] and again["hits"] > 0 and not again["misses"], again
    unheld, held = vector_isas()
    if unheld == held:
        pytest.skip(f"this CPU's vector ISA is {unheld!r} held to AVX2 or not: no other graph")
    # the same weights held to AVX2 on the cache an AVX-512 run filled: its own AVX2 graph (the
    # cache's own key lacks the ISA; without the tag's this run loaded the AVX-512 one, built it
    # with AVX2's flags, and its logits were garbage)
    avx2 = compile_in_a_process(directory, seed=0, held=True)
    assert avx2["close"] and avx2["misses"] > 0 and not avx2["hits"], avx2


def test_the_tag_names_the_vector_isa():
    unheld, held = vector_isas()
    assert held in {"avx2", "none"}, held  # as ATEN_CPU_CAPABILITY=avx2 allows at most
    if "avx512" in unheld:
        assert unheld != held


def test_the_fingerprint_follows_the_weights():
    torch.manual_seed(0)
    model = DecoderOnlyLM(LMConfig(**LLAMA))
    tag = weights_fingerprint(model)
    assert weights_fingerprint(model) == tag
    with torch.no_grad():
        model.blocks.layers[0].ffn.w_2.weight[0, 0] += 2 ** -20
    assert weights_fingerprint(model) != tag
    assert weights_fingerprint(model.to(torch.bfloat16)) != tag


def test_the_cache_directory(tmp_path, monkeypatch):
    monkeypatch.delenv(CACHE_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_compile_cache() == tmp_path / "xdg" / "decoderkit" / "torch-compile"
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "torch"))
    assert default_compile_cache() == tmp_path / "torch"
    made = use_compile_cache(tmp_path / "a" / "b")
    assert made.is_dir() and os.environ[CACHE_ENV] == str(made)
    (tmp_path / "file").write_text("mine")
    with pytest.raises(UsageError, match=r"--compile-cache .*file: expected a directory"):
        use_compile_cache(tmp_path / "file")
    with pytest.raises(UsageError, match="cannot make the directory"):
        use_compile_cache(tmp_path / "file" / "below")
    assert (tmp_path / "file").read_text() == "mine"
