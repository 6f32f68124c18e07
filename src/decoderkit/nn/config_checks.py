"""The checks both model configs (``ModelConfig``, ``LMConfig``) make, each stated once; a
rule of one family only (tied vocabularies, token ids) stays with its config."""

from __future__ import annotations

from decoderkit.base.checks import (
    FRACTION,
    MODEL_SIZES,
    POSITIVE,
    check_bools,
    check_choice,
    check_fields,
    check_parameter_budget,
    count,
)
from decoderkit.base.errors import UsageError
from decoderkit.nn.attention import check_heads, check_kv_heads
from decoderkit.nn.embeddings import check_sinusoidal_width
from decoderkit.nn.ffn import ACTIVATIONS, FFNS
from decoderkit.nn.rope import check_scaling

HEAD_DIM = count(1, 1 << 12)  # an explicit head width: at most 4,096
NORMS = ("standard", "rms")  # an LM's norms (the annotated one is the translation course's)


def check_model_config(config, *, sizes: tuple[str, ...], bools: tuple[str, ...],
                       sinusoidal: bool, head_dim: int | None = None) -> None:
    """Each of ``sizes`` within ``MODEL_SIZES`` and the model they give within the parameter
    budget (``config.approximate_parameters()``), dropout in [0, 1), heads dividing d_model,
    each of ``bools`` a bool, the activation one of ``ACTIVATIONS``, and d_model even when
    the positions are ``sinusoidal``; else a ``UsageError`` naming the field. An explicit
    ``head_dim`` frees d_model from dividing by the heads."""
    check_fields(config, {name: MODEL_SIZES[name] for name in sizes} | {"dropout": FRACTION})
    check_parameter_budget(", ".join(f"{name}={getattr(config, name)}" for name in sizes),
                           config.approximate_parameters())
    if head_dim is None:
        check_heads(config.d_model, config.n_heads)
    check_bools(config, bools)
    check_choice("activation", config.activation, ACTIVATIONS)
    if sinusoidal:
        check_sinusoidal_width(config.d_model)


def check_llama_options(config) -> None:
    """An ``LMConfig``'s Llama-family fields: norm, FFN, key/value heads, head width, the
    optional biases and q/k norms, RoPE's base and scaling; else a ``UsageError`` naming the
    field."""
    check_choice("norm", config.norm, NORMS)
    check_choice("ffn", config.ffn, FFNS)
    check_fields(config, {"norm_eps": POSITIVE, "head_dim": HEAD_DIM, "rope_theta": POSITIVE,
                          "rope_factor": POSITIVE, "rope_low_freq_factor": POSITIVE,
                          "rope_high_freq_factor": POSITIVE,
                          "rope_original_max_len": MODEL_SIZES["max_len"]},
                 optional=("head_dim",))
    if config.n_kv_heads is not None:
        check_kv_heads(config.n_heads, config.n_kv_heads)
    check_bools(config, ("qk_norm",) + (("qkv_bias",) if config.qkv_bias is not None else ()))
    check_scaling(config.rope_scaling)
    if config.rope_low_freq_factor >= config.rope_high_freq_factor:
        raise UsageError(f"rope_low_freq_factor must be below rope_high_freq_factor, got "
                         f"{config.rope_low_freq_factor} and {config.rope_high_freq_factor}")
    if config.positions == "rope" and config.d_head % 2:
        raise UsageError(f"positions 'rope' needs an even head width, got {config.d_head}")
