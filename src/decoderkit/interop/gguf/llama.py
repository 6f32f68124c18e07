"""Llama-family LMs (RMSNorm, RoPE, SwiGLU, grouped-query attention) as the llama.cpp
architecture of their Hugging Face model type (``interop.lm.architectures``):
``llama``, ``qwen2`` (q/k/v biases alone: ``blk.N.attn_{q,k,v}.bias``) or ``qwen3`` (per-head
q/k RMSNorms: ``blk.N.attn_{q,k}_norm.weight``). The tensors are the Hugging Face ones
(``interop.llama.hf_export``: q, k, v split) under the names ``gguf``'s own TensorNameMap gives
them. llama.cpp rotates a ``llama``'s pairs interleaved, so there the q and k rows are permuted
from Hugging Face's rotate-half layout (a head's first half of pairs, then its second) to pair
i's two rows side by side, as llama.cpp's converter does: a head's rows (2, d_k / 2) become
(d_k / 2, 2); it rotates ``qwen2`` and ``qwen3`` in halves (NEOX), so theirs are written as they
are. RoPE: theta, linear scaling as its type and factor, Llama 3's as ``rope_freqs.weight``
(each pair's frequency divisor, as llama.cpp's converter writes it; ``llama`` alone reads it).
The head width is ``key_length`` / ``value_length`` (Qwen3's is no divisor of the width)."""

from __future__ import annotations

import numpy as np
import torch

from decoderkit.base.errors import UsageError
from decoderkit.interop.artifacts import import_extra
from decoderkit.interop.gguf.writer import Architecture, add_shape, numpy32
from decoderkit.interop.llama.hf_export import hf_tensors
from decoderkit.interop.lm.architectures import LLAMA, LMArchitecture
from decoderkit.nn.lm.model import DecoderOnlyLM, LMConfig
from decoderkit.nn.rope import RopeSpec

INTERLEAVED = (LLAMA,)  # the architectures whose RoPE rotates adjacent pairs (q/k permuted)


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


def llama_architecture(model: DecoderOnlyLM, row: LMArchitecture) -> Architecture:
    """``model``'s tensors under the names of its llama.cpp architecture ``row`` (llama,
    qwen2 or qwen3: ``interop.lm.architectures.architecture_of``; q/k permuted for llama) and
    its keys; what that architecture cannot hold refused naming the field."""
    c, arch = model.config, row.name
    if c.rope_scaling == "llama3" and arch not in INTERLEAVED:
        raise UsageError(f"llama.cpp's {arch} architecture cannot express rope_scaling="
                         "'llama3' (only its llama reads Llama 3's frequency divisors)")
    gguf = import_extra("gguf")
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH[arch.upper()], c.n_layers)
    tensors = {}
    for hf_name, value in hf_tensors(model).items():
        name = names.get_name(hf_name, try_suffixes=(".weight", ".bias"))
        if name is None:
            raise UsageError(f"llama.cpp's {arch} architecture has no tensor for {hf_name}")
        array = numpy32(value)
        if arch in INTERLEAVED and ".self_attn.q_proj." in hf_name:
            array = to_interleaved(array, c.n_heads)
        elif arch in INTERLEAVED and ".self_attn.k_proj." in hf_name:
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

    return Architecture(arch, hparams, tensors)


def _frequencies(c: LMConfig, scaling: str) -> torch.Tensor:
    """A head's RoPE frequencies under ``scaling`` (nn.rope's, the model's own)."""
    return RopeSpec(c.d_head, c.rope_theta, scaling, c.rope_factor, c.rope_low_freq_factor,
                    c.rope_high_freq_factor, c.rope_original_max_len).frequencies()
