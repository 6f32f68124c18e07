"""A LoRA adapter alone as llama.cpp's LoRA GGUF: the keys and tensors as llama.cpp's
convert_lora_to_gguf.py writes them (B's q/k rows permuted for a llama), read back with the
gguf package; and llama.cpp running the base GGUF with it (llama-cpp-python's ``lora_path``)
continues prompts greedily as our merged model does, where our margin decides."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch
from conftest import assert_tokens_agree_where_decided
from interop import gguf_helpers as h

from decoderkit.interop.gguf.export import export_gguf
from decoderkit.interop.gguf.llama import to_rotate_half
from decoderkit.interop.gguf.lora import FILE, export_lora_gguf
from decoderkit.interop.gguf.writer import FILE as MODEL_FILE
from decoderkit.nn.lm.lora import adapted, add_lora, merge_lora
from decoderkit.nn.lora import LoRAConfig

GGML_BOUND = 2e-4  # test_llama's: llama.cpp's float32 kernels against ours


@pytest.fixture(scope="module")
def tokenizer():
    return h.bpe_tokenizer()


def tuned(lora: LoRAConfig, seed: int = 1):
    """(the base, the base with adapters of ``lora`` whose B are random) of a random Llama."""
    base = h.llama(seed=seed)
    model = copy.deepcopy(base)
    add_lora(model, lora)
    g = torch.Generator().manual_seed(seed + 10)
    with torch.no_grad():
        for layer, part in adapted(model).values():
            layer.lora_B[part].copy_(0.5 * torch.randn(layer.lora_B[part].shape, generator=g))
    return base, model.eval()


@pytest.mark.parametrize("rslora", [False, True])
def test_the_file_is_llama_cpps_lora_gguf(tmp_path, rslora):
    lora = LoRAConfig(r=4, alpha=8, targets=("q_proj", "k_proj", "down_proj"), rslora=rslora)
    _, model = tuned(lora)
    tensors, fields, _ = h.read_back(export_lora_gguf(model, lora, tmp_path / "out") / FILE)
    assert fields["general.architecture"] == "llama" and fields["general.type"] == "adapter"
    assert fields["adapter.type"] == "lora"
    assert math.isclose(fields["adapter.lora.alpha"] / 4, lora.scale, rel_tol=1e-6)
    assert len(tensors) == 2 * 2 * 3
    layer, _ = adapted(model)["model.layers.1.self_attn.k_proj"]
    np.testing.assert_array_equal(tensors["blk.1.attn_k.weight.lora_a"],
                                  layer.lora_A["k_proj"].detach().numpy())
    np.testing.assert_array_equal(to_rotate_half(tensors["blk.1.attn_k.weight.lora_b"],
                                                 h.KV_HEADS),
                                  layer.lora_B["k_proj"].detach().numpy())
    down, _ = adapted(model)["model.layers.0.mlp.down_proj"]
    np.testing.assert_array_equal(tensors["blk.0.ffn_down.weight.lora_b"],
                                  down.lora_B["down_proj"].detach().numpy())


def test_llama_cpp_with_the_adapter_continues_as_our_merged_model(tmp_path, tokenizer):
    llama_cpp = pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed "
                                    "(the llamacpp extra; see docs/deployment.md)")
    lora = LoRAConfig(r=4, alpha=8, targets=("all-linear",))
    base, model = tuned(lora)
    base_file = export_gguf(base, tokenizer, tmp_path / "base") / MODEL_FILE
    adapter_file = export_lora_gguf(model, lora, tmp_path / "lora") / FILE
    merged = merge_lora(copy.deepcopy(model)).eval()
    llm = llama_cpp.Llama(model_path=str(base_file), lora_path=str(adapter_file),
                          n_ctx=h.CONTEXT, n_threads=1, n_batch=h.CONTEXT, logits_all=True,
                          verbose=False, type_k=h.F32, type_v=h.F32)
    want, margins = h.greedy_with_margins(merged, h.PROMPTS, 16)
    got = [h.llama_cpp_greedy(llm, p, 16) for p in h.PROMPTS]
    assert_tokens_agree_where_decided(want, got, margins, GGML_BOUND, at_least=2)
    ids = tokenizer.encode(" ".join(h.TEXT[:4]))[:h.CONTEXT]
    with torch.no_grad():
        ours = merged(torch.tensor([ids]))[0].numpy()
    gaps = []
    for engine in (llm, h.llama_cpp_model(base_file, h.CONTEXT)):  # with and without it
        engine.reset()
        engine.eval(ids)
        gaps.append(float(np.abs(np.asarray(engine.scores[:len(ids)]) - ours).max()))
    assert gaps[0] < 2e-3 and gaps[1] > 100 * gaps[0], gaps  # the adapter is what agrees
