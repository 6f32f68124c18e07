"""The checks both model configs (``ModelConfig``, ``LMConfig``) make, each stated once; a
rule of one family only (tied vocabularies, token ids) stays with its config."""

from __future__ import annotations

from decoderkit.base.checks import (
    FRACTION,
    MODEL_SIZES,
    check_bools,
    check_choice,
    check_fields,
    check_parameter_budget,
)
from decoderkit.nn.attention import check_heads
from decoderkit.nn.embeddings import check_sinusoidal_width
from decoderkit.nn.layers import ACTIVATIONS


def check_model_config(config, *, sizes: tuple[str, ...], bools: tuple[str, ...],
                       sinusoidal: bool) -> None:
    """Each of ``sizes`` within ``MODEL_SIZES`` and the model they give within the parameter
    budget (``config.approximate_parameters()``), dropout in [0, 1), heads dividing d_model,
    each of ``bools`` a bool, the activation one of ``ACTIVATIONS``, and d_model even when
    the positions are ``sinusoidal``; else a ``UsageError`` naming the field."""
    check_fields(config, {name: MODEL_SIZES[name] for name in sizes} | {"dropout": FRACTION})
    check_parameter_budget(", ".join(f"{name}={getattr(config, name)}" for name in sizes),
                           config.approximate_parameters())
    check_heads(config.d_model, config.n_heads)
    check_bools(config, bools)
    check_choice("activation", config.activation, ACTIVATIONS)
    if sinusoidal:
        check_sinusoidal_width(config.d_model)
