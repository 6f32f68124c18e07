"""Shared by the GGUF export tests: reading a file back with the ``gguf`` package's own reader
(tensors dequantised by ``gguf.quants``), q8_0's error bound, and llama.cpp through
llama-cpp-python (greedy tokens, per-token log-likelihoods); a random tiny Llama."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pytest

if TYPE_CHECKING:
    from decoderkit.nn.lm.model import DecoderOnlyLM

F32 = 0  # GGML_TYPE_F32: the key/value cache at float32 (llama.cpp's default: float16)
V, CONTEXT, HEADS, KV_HEADS = 320, 64, 4, 2  # a model's rows (bpe_tokenizer's 300 + 20 unused)
gguf = pytest.importorskip("gguf", reason="the gguf package is not installed "
                           '(pip install "decoderkit[export]")')


def read_back(path) -> tuple[dict[str, np.ndarray], dict[str, object], dict[str, str]]:
    """(tensors as float32 in numpy's row order, key -> value, tensor -> type name) of a GGUF
    file, through ``gguf.GGUFReader``."""
    reader = gguf.GGUFReader(path)
    tensors, types = {}, {}
    for t in reader.tensors:
        data = gguf.quants.dequantize(t.data, t.tensor_type)
        tensors[t.name] = np.asarray(data, dtype=np.float32).reshape(
            [int(n) for n in reversed(t.shape)])
        types[t.name] = t.tensor_type.name
    fields = {name: f.contents() for name, f in reader.fields.items()}
    return tensors, fields, types


def q8_bound(array: np.ndarray) -> np.ndarray:
    """q8_0's per-element error bound: per block of 32 a scale d = max|x| / 127 stored as
    float16, each value round(x / d): |error| <= d / 2 + 127 |d - fp16(d)| < 0.57 d."""
    blocks = np.abs(array.reshape(-1, 32)).max(axis=1, keepdims=True) / 127
    return np.broadcast_to(0.57 * blocks + 1e-12, (blocks.shape[0], 32)).reshape(array.shape)


def llama_cpp_model(path, n_ctx: int):
    """llama.cpp's model of ``path`` (llama-cpp-python), every position's logits kept; the
    test is skipped where the optional ``llamacpp`` extra is not installed."""
    llama_cpp = pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed "
                                    "(the llamacpp extra; see docs/deployment.md)")
    return llama_cpp.Llama(model_path=str(path), n_ctx=n_ctx, n_threads=1, n_batch=n_ctx,
                           logits_all=True, verbose=False, type_k=F32, type_v=F32)


def llama_cpp_greedy(llm, prompt: list[int], new: int) -> list[int]:
    """``new`` greedy tokens after ``prompt`` by llama.cpp (argmax of its logits)."""
    llm.reset()
    llm.eval(prompt)
    out = []
    for _ in range(new):
        token = int(np.argmax(llm.scores[llm.n_tokens - 1]))
        out.append(token)
        llm.eval([token])
    return out


def llama_cpp_nll(llm, ids: list[int]) -> float:
    """llama.cpp's mean negative log-likelihood of ``ids[1:]`` given what precedes each."""
    llm.reset()
    llm.eval(ids)
    logits = np.asarray(llm.scores[:len(ids) - 1], dtype=np.float64)
    logits -= logits.max(axis=1, keepdims=True)
    logp = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    return float(-logp[np.arange(len(ids) - 1), ids[1:]].mean())


def greedy_with_margins(lm, prompts: list[list[int]], new: int):
    """(our greedy tokens, per step our top-1 minus top-2 log-probability) of each prompt."""
    import torch

    from decoderkit.generation.lm.complete import generate

    tokens = generate(lm, prompts, max_new_tokens=new, greedy=True)
    margins = []
    with torch.no_grad():
        for prompt, got in zip(prompts, tokens, strict=True):
            logp = lm(torch.tensor([prompt + got])).log_softmax(-1)[0, len(prompt) - 1:-1]
            top = logp.topk(2).values
            margins.append((top[:, 0] - top[:, 1]).tolist())
    return tokens, margins


def our_nll(lm, ids: list[int]) -> float:
    """Our mean negative log-likelihood of ``ids[1:]`` (float32)."""
    import torch

    with torch.no_grad():
        logp = lm(torch.tensor([ids])).log_softmax(-1)[0, :-1]
    return float(-logp.gather(1, torch.tensor(ids[1:])[:, None]).mean())


def llama(tied: bool = True, seed: int = 0, std: float = 0.3, **overrides) -> DecoderOnlyLM:
    """A random 2-layer Llama: RMSNorm, RoPE, SwiGLU, 4 query heads over 2 key/value heads;
    every weight N(0, std^2), the norms' around 1."""
    import torch

    from decoderkit.nn.lm.model import DecoderOnlyLM, LMConfig

    config = LMConfig(vocab_size=V, n_layers=2, d_model=64, n_heads=HEADS, n_kv_heads=KV_HEADS,
                      d_ff=128, max_len=CONTEXT, dropout=0.0, tie_head=tied, bias=False,
                      positions="rope", norm="rms", ffn="gated", activation="swish",
                      norm_eps=1e-6, rope_theta=500000.0, **overrides)
    lm = DecoderOnlyLM(config)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in lm.parameters():
            p.copy_((1.0 if p.dim() == 1 else 0.0) + std * torch.randn(p.shape, generator=g))
    return lm.eval()


def bpe_tokenizer():
    """A byte-level BPE of 300 tokens learnt from ``TEXT``, <|endoftext|> its last."""
    from decoderkit.text.lm.tokenizer import END_OF_TEXT, LMTokenizer

    tok = LMTokenizer.train_bpe(TEXT, 299)
    tok.hf.add_special_tokens([END_OF_TEXT])
    return tok


TEXT = ["the quick brown fox jumps over the lazy dog", "pack my box with five dozen jugs",
        "how vexingly quick daft zebras jump", "sphinx of black quartz, judge my vow"] * 20
PROMPTS = [[5, 17, 3, 42, 8], [260, 33, 12], [299], [100, 101, 102, 103, 104, 105], [7], [64, 9],
           [31, 250, 2, 88], [150]]
