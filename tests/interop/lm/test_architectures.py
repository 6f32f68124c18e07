"""The one LM architecture table: each row is what transformers and llama.cpp's ``gguf`` call
it (checked against them, not against our own strings), each preset detects as the row its
block is, and every exporter and ``lm export`` take the row from ``architecture_of``."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from decoderkit.interop.lm.architectures import ARCHITECTURES, GGUF_TYPES, architecture_of
from decoderkit.interop.lm.architectures import GPT2, LLAMA, QWEN2, QWEN3
from decoderkit.nn.lm.presets import lm_preset

transformers = pytest.importorskip("transformers")
gguf = pytest.importorskip("gguf")
SRC = Path(__file__).resolve().parents[3] / "src" / "decoderkit"


@pytest.mark.parametrize("name", sorted(ARCHITECTURES))
def test_each_row_is_transformers_and_llama_cpps_own_name(name):
    row = ARCHITECTURES[name]
    model_class = getattr(transformers, row.hf_class)
    assert model_class.config_class.model_type == name
    assert transformers.CONFIG_MAPPING[name] is model_class.config_class
    assert hasattr(transformers, row.loader)
    assert gguf.MODEL_ARCH[name.upper()] in gguf.MODEL_ARCH_NAMES  # llama.cpp's architecture
    assert gguf.MODEL_ARCH_NAMES[gguf.MODEL_ARCH[name.upper()]] == name


def test_each_config_detects_as_its_block():
    llama = dataclasses.replace(lm_preset("llama"), vocab_size=50, n_layers=1, d_model=16,
                                d_ff=24, max_len=32)
    assert architecture_of(llama).name == LLAMA
    assert architecture_of(dataclasses.replace(llama, qkv_bias=True)).name == QWEN2
    assert architecture_of(dataclasses.replace(llama, qk_norm=True)).name == QWEN3
    for preset, name in (("gpt2", GPT2), ("smollm2-135m", LLAMA), ("llama3.2-1b", LLAMA),
                         ("qwen2.5-0.5b", QWEN2), ("qwen3-0.6b", QWEN3)):
        assert architecture_of(lm_preset(preset)).name == name, preset
    assert {row.block for row in ARCHITECTURES.values()} == {LLAMA, GPT2}


def test_the_gguf_types_are_ggmls():
    assert all(kind == "float32" or kind.upper().replace("FLOAT", "F") in
               gguf.GGMLQuantizationType.__members__ for kind in GGUF_TYPES)


def test_no_exporter_detects_the_architecture_itself():
    """``is_llama_shaped`` / ``model_type_of`` are the table's: an exporter, the CLI and the
    writers call ``architecture_of`` (the table module and the Hugging Face export, which
    checks the row it was given, aside)."""
    own = {SRC / "interop" / "lm" / "architectures.py", SRC / "interop" / "llama" / "hf_export.py"}
    found = [str(p.relative_to(SRC)) for p in sorted(SRC.rglob("*.py")) if p not in own
             and ("is_llama_shaped(" in (text := p.read_text(encoding="utf-8"))
                  or "model_type_of(" in text)]
    assert not found, f"detecting the LM architecture outside the table: {found}"
