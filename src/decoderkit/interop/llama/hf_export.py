"""Any Llama-shaped ``DecoderOnlyLM`` (RMSNorm, RoPE, gated FFN, pre-norm) written back as a
Hugging Face directory ``AutoModelForCausalLM.from_pretrained`` loads with the same logits:
model_type ``qwen3`` where the heads have q/k norms, ``qwen2`` where q/k/v alone are biased,
else ``llama``. The tensors are ``interop.llama.hf``'s name map read backwards (our packed
``in_proj`` split into q, k, v); the config carries RoPE as ``rope_theta`` + ``rope_scaling``,
the keys transformers 4 and 5 and CTranslate2's converter all read; the tokenizer's files and
generation_config.json are ``interop.lm.export``'s.
"""

from __future__ import annotations

from pathlib import Path

import torch

from decoderkit.base.errors import UsageError
from decoderkit.generation.lm.defaults import NO_DEFAULTS, GenerationDefaults
from decoderkit.interop.llama.hf import LLAMA, PREFIX, QWEN2, QWEN3, weight_names
from decoderkit.interop.lm.export import write_lm_directory
from decoderkit.nn.lm.model import DecoderOnlyLM, LMConfig
from decoderkit.text.lm.tokenizer import LMTokenizer

# the LMConfig fields a Llama-family directory fixes: name -> the value it needs
FIXED = {"norm_first": True, "positions": "rope", "norm": "rms", "ffn": "gated",
         "activation": "swish", "scale_embeddings": False}
ARCHITECTURES = {LLAMA: "LlamaForCausalLM", QWEN2: "Qwen2ForCausalLM",
                 QWEN3: "Qwen3ForCausalLM"}


def is_llama_shaped(config: LMConfig) -> bool:
    """True if ``config`` is the Llama family's block (RoPE and RMSNorm): exported here."""
    return config.positions == "rope" and config.norm == "rms"


def model_type_of(config: LMConfig) -> str:
    """The HF model type that holds ``config`` exactly; what none holds is refused naming the
    field, the value it has and the one it needs."""
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


def hf_config(model: DecoderOnlyLM, tokenizer: LMTokenizer | None) -> dict:
    """The config.json of ``model`` (checked exportable; the special ids:
    ``interop.lm.export``'s)."""
    c = model.config
    kind = model_type_of(c)
    if tokenizer is not None and tokenizer.vocab_size > c.vocab_size:
        raise UsageError(f"the tokenizer has {tokenizer.vocab_size} tokens, more than the "
                         f"model's vocab_size {c.vocab_size}")
    scaling = None if c.rope_scaling == "default" else {"rope_type": c.rope_scaling,
                                                        "factor": c.rope_factor}
    if c.rope_scaling == "llama3":
        scaling |= {"low_freq_factor": c.rope_low_freq_factor,
                    "high_freq_factor": c.rope_high_freq_factor,
                    "original_max_position_embeddings": c.rope_original_max_len}
    out = {"model_type": kind, "architectures": [ARCHITECTURES[kind]],
           "vocab_size": c.vocab_size, "hidden_size": c.d_model, "intermediate_size": c.d_ff,
           "num_hidden_layers": c.n_layers, "num_attention_heads": c.n_heads,
           "num_key_value_heads": c.kv_heads, "head_dim": c.d_head, "hidden_act": "silu",
           "max_position_embeddings": c.max_len, "rms_norm_eps": c.norm_eps,
           "rope_theta": c.rope_theta, "rope_scaling": scaling,
           "tie_word_embeddings": c.tie_head,
           "torch_dtype": str(model.embed.lut.weight.dtype).removeprefix("torch.")}
    if kind != QWEN2:
        out |= {"attention_bias": c.bias, "mlp_bias": c.bias}
    return out


def hf_tensors(model: DecoderOnlyLM) -> dict[str, torch.Tensor]:
    """The HF tensors of ``model``: each of our parameters under its HF name(s), ``in_proj``
    split into its q, k, v rows."""
    ours = model.state_dict()
    tensors = {}
    for name, src in weight_names(model.config).params.items():
        if name not in ours:
            continue
        value = ours[name].detach().to("cpu")
        parts = value.split(list(src.rows)) if src.rows else (value,)
        for theirs, part in zip(src.names, parts, strict=True):
            key = theirs if theirs == "lm_head.weight" else PREFIX + theirs
            tensors[key] = part.contiguous().clone()
    return tensors


def export_llama(model: DecoderOnlyLM, tokenizer: LMTokenizer | None, out: str | Path,
                 overwrite: bool = False, generation: GenerationDefaults = NO_DEFAULTS,
                 chat_template: str | None = None) -> Path:
    """Write ``out``: config.json, model.safetensors, the whole tokenizer when one is given,
    generation_config.json (the end ids and ``generation``'s defaults), the ``chat_template``
    where there is one and decoderkit's manifest; atomically
    (``interop.lm.export.write_lm_directory``; ``overwrite``: only an earlier export)."""
    if not isinstance(model, DecoderOnlyLM):
        raise TypeError(f"model must be a DecoderOnlyLM, got {type(model).__name__}")
    config = hf_config(model, tokenizer)
    manifest = {"engine": "transformers", "config": model.config.to_dict()}
    return write_lm_directory(out, overwrite, hf_tensors(model), config, tokenizer, manifest,
                              context=model.config.max_len, generation=generation,
                              chat_template=chat_template)
