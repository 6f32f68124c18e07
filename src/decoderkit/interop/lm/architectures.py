"""The one table of the LM architectures decoderkit writes and reads in other libraries' formats:
each row's name is at once the Hugging Face ``model_type`` and llama.cpp's
``general.architecture``, with its transformers classes and the block it is; ``architecture_of``
detects a config's row once, and every exporter (Hugging Face: ``interop.gpt.hf``,
``interop.llama.hf_export``; GGUF: ``interop.gguf.export``, the LoRA GGUF ``interop.gguf.lora``)
and ``lm export`` take it from there. ``GGUF_TYPES``: the matrices' types a GGUF export writes.

A config is Llama-shaped where it has RoPE and RMSNorm; then ``FIXED`` must hold and the biases
pick the row (q/k norms: ``qwen3``; q/k/v biases alone: ``qwen2``; else ``llama``). Any other
config is GPT-2's block, which its exporters check field by field.
"""

from __future__ import annotations

from dataclasses import dataclass

from decoderkit.base.errors import UsageError
from decoderkit.nn.lm.model import LMConfig

GPT2, LLAMA, QWEN2, QWEN3 = "gpt2", "llama", "qwen2", "qwen3"
GGUF_TYPES = ("float32", "float16", "q8_0")  # --type: the 2-D weights' (1-D ones stay float32)
# the LMConfig fields a Llama-family directory fixes: name -> the value it needs
FIXED = {"norm_first": True, "positions": "rope", "norm": "rms", "ffn": "gated",
         "activation": "swish", "scale_embeddings": False}


@dataclass(frozen=True)
class LMArchitecture:
    """One architecture of the table."""

    name: str  # the Hugging Face model_type and llama.cpp's general.architecture: "qwen2"
    block: str  # the block it is, which picks each format's writer: LLAMA (RoPE, RMSNorm,
    # gated FFN) or GPT2 (learned positions, LayerNorm, MLP)
    hf_class: str  # config.json's architectures: "Qwen2ForCausalLM"
    loader: str  # the transformers class a user opens the export with


ARCHITECTURES = {a.name: a for a in (
    LMArchitecture(LLAMA, LLAMA, "LlamaForCausalLM", "AutoModelForCausalLM"),
    LMArchitecture(QWEN2, LLAMA, "Qwen2ForCausalLM", "AutoModelForCausalLM"),
    LMArchitecture(QWEN3, LLAMA, "Qwen3ForCausalLM", "AutoModelForCausalLM"),
    LMArchitecture(GPT2, GPT2, "GPT2LMHeadModel", "GPT2LMHeadModel"),
)}


def is_llama_shaped(config: LMConfig) -> bool:
    """True if ``config`` is the Llama family's block (RoPE and RMSNorm)."""
    return config.positions == "rope" and config.norm == "rms"


def architecture_of(config: LMConfig) -> LMArchitecture:
    """The row of ``config``: a Llama-shaped one's ``model_type_of``, else GPT-2's."""
    return ARCHITECTURES[model_type_of(config) if is_llama_shaped(config) else GPT2]


def model_type_of(config: LMConfig) -> str:
    """The Llama-family model type that holds ``config`` exactly; what none holds is refused
    naming the field, the value it has and the one it needs."""
    for name, want in FIXED.items():
        if getattr(config, name) != want:
            raise UsageError(f"a Llama-family directory cannot express {name}="
                             f"{getattr(config, name)!r} (needs {want!r})")
    qkv_bias = config.bias if config.qkv_bias is None else config.qkv_bias
    if config.qk_norm:
        if config.bias or qkv_bias:
            raise UsageError("a Llama-family directory cannot express qk_norm with biases "
                             "(qwen3's are none)")
        return QWEN3
    if qkv_bias and not config.bias:
        return QWEN2
    if qkv_bias != config.bias:
        raise UsageError("a Llama-family directory cannot express bias=True with "
                         "qkv_bias=False")
    return LLAMA
