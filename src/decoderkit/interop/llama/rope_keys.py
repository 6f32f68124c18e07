"""A Llama-family ``config.json``'s RoPE keys read as transformers 5 reads them (its
``RotaryEmbeddingConfigMixin``: ``convert_rope_params_to_dict``, ``standardize_rope_params``,
``validate_rope``; read in 5.24), then refused in one line where decoderkit does not compute
what they say.

transformers' reading, step by step (each tested against its ``LlamaRotaryEmbedding``):
- the parameters are ``rope_scaling`` (the older key) when it is a non-empty object, else
  ``rope_parameters``: a non-empty ``rope_scaling`` *replaces* ``rope_parameters`` whole
  (it is not merged key by key: its ``rope_theta`` is not taken from ``rope_parameters``);
- ``rope_theta``: the parameters' own, else the top-level ``rope_theta``, else 10000;
  ``partial_rotary_factor`` likewise (else 1.0);
- the type: ``rope_type`` where the parameters name it, else ``type``, else "default";
- llama3 (and yarn, longrope): ``original_max_position_embeddings`` is the top-level key where
  there is one (Phi-3's place; it wins over the parameters'), else the parameters', else
  ``max_position_embeddings``;
- keys a type does not use are ignored (transformers warns); keys it needs that are missing
  are refused (transformers raises).

Refused naming the key and its value: a type other than ``nn.rope.ROPE_SCALINGS`` (dynamic,
yarn, longrope, proportional, unknown ones), RoPE per layer type (nested objects), a factor
below 1 or not finite (transformers' own bound, which it only warns of: 0 gives infinite
frequencies, -1 negative ones), low/high frequency factors that are not positive, an
original context that is not a positive integer.
"""

from __future__ import annotations

from pathlib import Path

from decoderkit.base.checks import POSITIVE, Range, count
from decoderkit.base.errors import UsageError
from decoderkit.interop.fields import read_field, shown
from decoderkit.nn.rope import check_scaling

DEFAULT_THETA = 10000.0  # transformers' default_theta for llama, mistral, qwen2, qwen3
FACTOR = Range(False, 1.0)  # a context stretch: finite, >= 1 (transformers' validation)
ORIGINAL = "original_max_position_embeddings"
ORIGINAL_TYPES = ("llama3", "yarn", "longrope")  # where transformers fills ORIGINAL in


def rope_fields(c: dict, file: Path) -> dict:
    """Our ``LMConfig`` rope_* fields of the config ``c`` (its keys with the model type's
    defaults) read from ``file``, as transformers reads them (the module docstring)."""
    params, key = _parameters(c, file)
    where = f"{file}: {key}"
    kind = params.get("rope_type", params.get("type", "default"))
    if not isinstance(kind, str):
        raise UsageError(f"{where}: rope_type must be a string, got {shown(kind)}")
    check_scaling(kind, f"{where} type")
    theta = params.get("rope_theta", c.get("rope_theta", DEFAULT_THETA))
    read_field({"rope_theta": theta}, "rope_theta", POSITIVE, where)
    partial = params.get("partial_rotary_factor", c.get("partial_rotary_factor", 1.0))
    if partial != 1.0 or isinstance(partial, bool):
        raise UsageError(f"{where}: partial_rotary_factor={shown(partial)} is not supported "
                         "(decoderkit rotates whole heads: 1.0)")
    fields = {"rope_theta": theta, "rope_scaling": kind}
    if kind in ("linear", "llama3"):
        fields["rope_factor"] = read_field(params, "factor", FACTOR, where)
    if kind == "llama3":
        original = c[ORIGINAL] if ORIGINAL in c else params.get(
            ORIGINAL, c.get("max_position_embeddings"))
        fields |= {"rope_low_freq_factor": read_field(params, "low_freq_factor", POSITIVE, where),
                   "rope_high_freq_factor": read_field(params, "high_freq_factor", POSITIVE,
                                                       where),
                   "rope_original_max_len": read_field({ORIGINAL: original}, ORIGINAL,
                                                       count(1), where)}
        if fields["rope_high_freq_factor"] <= fields["rope_low_freq_factor"]:
            raise UsageError(f"{where}: high_freq_factor={fields['rope_high_freq_factor']!r} "
                             f"must be above low_freq_factor="
                             f"{fields['rope_low_freq_factor']!r}")
    return fields


def _parameters(c: dict, file: Path) -> tuple[dict, str]:
    """(the RoPE parameters transformers uses, the key they came from): a non-empty
    ``rope_scaling`` object, else ``rope_parameters``, else none ({})."""
    for key in ("rope_scaling", "rope_parameters"):
        value = c.get(key)
        if value is None or value == {}:
            continue
        if not isinstance(value, dict):
            raise UsageError(f"{file}: {key} must be a JSON object or null, got {shown(value)}")
        nested = next((k for k, v in value.items() if isinstance(v, dict)), None)
        if nested is not None:
            raise UsageError(f"{file}: {key}.{nested} is an object: RoPE per layer type is not "
                             "supported (decoderkit rotates every layer alike)")
        return value, key
    return {}, "rope_parameters"
