"""Any Llama-shaped ``DecoderOnlyLM`` (RMSNorm, RoPE, gated FFN, pre-norm) written back as a
Hugging Face directory ``AutoModelForCausalLM.from_pretrained`` loads with the same logits:
model_type ``qwen3``, ``qwen2`` or ``llama`` (``interop.lm.architectures``' table). The tensors
are ``interop.llama.hf``'s name map read backwards (our packed ``in_proj`` split into q, k, v);
the config carries RoPE as ``rope_theta`` + ``rope_scaling``, the keys transformers 4 and 5
and CTranslate2's converter all read; the tokenizer's files and generation_config.json are
``interop.lm.export``'s.
"""

from __future__ import annotations

from pathlib import Path

import torch

from decoderkit.base.errors import UsageError
from decoderkit.base.moved import forward
from decoderkit.generation.lm.defaults import NO_DEFAULTS, GenerationDefaults
from decoderkit.interop.llama.hf import PREFIX, weight_names
from decoderkit.interop.lm.architectures import ARCHITECTURES, QWEN2, model_type_of
from decoderkit.interop.lm.export import write_lm_directory
from decoderkit.nn.lm.model import DecoderOnlyLM
from decoderkit.text.lm.tokenizer import LMTokenizer

__getattr__ = forward(__name__)  # is_llama_shaped, FIXED: interop.lm.architectures


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
    out = {"model_type": kind, "architectures": [ARCHITECTURES[kind].hf_class],
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
