"""Llama-shaped LMs (RMSNorm, RoPE, SwiGLU, grouped-query attention) as llama.cpp's ``llama``
architecture. The tensors are the Hugging Face ones (``interop.llama.hf_export``: q, k, v
split) under the names ``gguf``'s own TensorNameMap gives them, the q and k rows permuted from
Hugging Face's rotate-half layout (a head's first half of pairs, then its second) to GGUF's
interleaved one (pair i's two rows side by side), as llama.cpp's converter does: a head's
rows (2, d_k / 2) become (d_k / 2, 2). RoPE: theta, linear scaling as its type and factor,
Llama 3's as ``rope_freqs.weight`` (each pair's frequency divisor, as llama.cpp's converter
writes it)."""

from __future__ import annotations

import numpy as np
import torch

from decoderkit.base.errors import UsageError
from decoderkit.interop.artifacts import import_extra
from decoderkit.interop.gguf.writer import Architecture, add_shape, numpy32
from decoderkit.interop.llama.hf import LLAMA
from decoderkit.interop.llama.hf_export import hf_tensors, model_type_of
from decoderkit.nn.lm import DecoderOnlyLM, LMConfig
from decoderkit.nn.rope import RopeSpec

ARCH = "llama"


def to_interleaved(rows: np.ndarray, heads: int) -> np.ndarray:
    """q or k rows (heads * d_k, ...) from rotate-half order to GGUF's interleaved pairs."""
    shape = rows.shape
    return rows.reshape(heads, 2, shape[0] // heads // 2, *shape[1:]).swapaxes(1, 2) \
        .reshape(shape)


def to_rotate_half(rows: np.ndarray, heads: int) -> np.ndarray:
    """The inverse of ``to_interleaved``: GGUF's q or k rows back in Hugging Face's order."""
    shape = rows.shape
    return rows.reshape(heads, shape[0] // heads // 2, 2, *shape[1:]).swapaxes(1, 2) \
        .reshape(shape)


def llama_architecture(model: DecoderOnlyLM) -> Architecture:
    """``model``'s tensors under llama.cpp's llama names (q/k permuted) and its keys; a model
    the architecture cannot hold refused naming the field."""
    c = model.config
    if model_type_of(c) != LLAMA:  # checks the Llama block; qwen2/qwen3 need their own
        raise UsageError("GGUF export writes llama.cpp's llama architecture: a model with "
                         "q/k norms or q/k/v biases alone (qwen2, qwen3) is not exported yet")
    gguf = import_extra("gguf")
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, c.n_layers)
    tensors = {}
    for hf_name, value in hf_tensors(model).items():
        name = names.get_name(hf_name, try_suffixes=(".weight", ".bias"))
        if name is None:
            raise UsageError(f"llama.cpp's llama architecture has no tensor for {hf_name}")
        array = numpy32(value)
        if ".self_attn.q_proj." in hf_name:
            array = to_interleaved(array, c.n_heads)
        elif ".self_attn.k_proj." in hf_name:
            array = to_interleaved(array, c.kv_heads)
        tensors[name] = array
    if c.rope_scaling == "llama3":
        tensors["rope_freqs.weight"] = numpy32(_frequencies(c, "default")
                                               / _frequencies(c, "llama3"))

    def hparams(writer) -> None:
        add_shape(writer, c)
        writer.add_head_count_kv(c.kv_heads)
        writer.add_key_length(c.d_head)
        writer.add_value_length(c.d_head)
        writer.add_rope_dimension_count(c.d_head)
        writer.add_rope_freq_base(c.rope_theta)
        if c.rope_scaling == "linear":
            writer.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
            writer.add_rope_scaling_factor(c.rope_factor)
        writer.add_layer_norm_rms_eps(c.norm_eps)
        writer.add_vocab_size(c.vocab_size)

    return Architecture(ARCH, hparams, tensors)


def _frequencies(c: LMConfig, scaling: str) -> torch.Tensor:
    """A head's RoPE frequencies under ``scaling`` (nn.rope's, the model's own)."""
    return RopeSpec(c.d_head, c.rope_theta, scaling, c.rope_factor, c.rope_low_freq_factor,
                    c.rope_high_freq_factor, c.rope_original_max_len).frequencies()
