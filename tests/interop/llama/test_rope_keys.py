"""A config.json's RoPE keys (interop.llama.rope_keys) read as transformers 5 reads them:
``rope_scaling`` alone, ``rope_parameters`` alone and both (a non-empty ``rope_scaling``
replaces ``rope_parameters``), ``type`` or ``rope_type``, the top-level ``rope_theta`` and
``original_max_position_embeddings``; logits against transformers' own reading of the same
file, and what decoderkit does not compute refused in one line naming the key and value."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest
import torch

from decoderkit.base.errors import UsageError
from decoderkit.interop.llama.hf import load_llama, read_llama_config
from decoderkit.nn.rope import Rotary

transformers = pytest.importorskip("transformers")
from interop.llama_helpers import save_hf  # noqa: E402 (needs transformers)

IDS = torch.randint(0, 96, (1, 64), generator=torch.Generator().manual_seed(3))
LLAMA3 = {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 16}
LINEAR = {"factor": 4.0}
# name -> the RoPE keys of config.json (the rest is the tiny Llama's): each scaling through
# rope_scaling alone (transformers 4's keys: type, a top-level rope_theta), rope_parameters
# alone, and both (rope_parameters' default RoPE and theta lose to rope_scaling, as in
# transformers), with the top-level original context winning over the parameters'
WRITTEN = {
    "llama3-scaling": {"rope_theta": 50.0, "rope_scaling": {"type": "llama3"} | LLAMA3},
    "llama3-parameters": {"rope_parameters": {"rope_type": "llama3", "rope_theta": 50.0}
                          | LLAMA3},
    "llama3-both": {"rope_theta": 50.0, "rope_parameters": {"rope_type": "default",
                                                            "rope_theta": 1e6},
                    "rope_scaling": {"rope_type": "llama3", "type": "linear"} | LLAMA3},
    "llama3-original-top": {"rope_theta": 50.0, "original_max_position_embeddings": 8,
                            "rope_scaling": {"rope_type": "llama3"} | LLAMA3},
    "linear-scaling": {"rope_theta": 50.0, "rope_scaling": {"type": "linear"} | LINEAR},
    "linear-parameters": {"rope_parameters": {"rope_type": "linear", "rope_theta": 50.0}
                          | LINEAR},
    "linear-both": {"rope_theta": 50.0, "rope_parameters": {"rope_type": "default",
                                                            "rope_theta": 50.0},
                    "rope_scaling": {"type": "linear"} | LINEAR},
}


def write_rope(directory, keys: dict) -> None:
    """config.json of ``directory`` with its RoPE keys replaced by ``keys``."""
    file = directory / "config.json"
    raw = json.loads(file.read_text())
    for key in ("rope_parameters", "rope_scaling", "rope_theta",
                "original_max_position_embeddings"):
        raw.pop(key, None)
    file.write_text(json.dumps(raw | keys))


@pytest.mark.parametrize("name", list(WRITTEN))
def test_logits_equal_transformers_reading_of_the_same_keys(tmp_path, name):
    """Ours equal transformers' (AutoModelForCausalLM of the edited file) within 1e-4 over 64
    positions; the same weights with default RoPE differ from them by more than 100x that:
    the scaling is what makes them equal."""
    save_hf("llama-gqa", tmp_path)
    write_rope(tmp_path, WRITTEN[name])
    hf = transformers.AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    ours = load_llama(tmp_path)[0]
    assert ours.config.rope_scaling == name.split("-")[0]
    with torch.no_grad():
        want, got = hf(IDS).logits, ours(IDS)
        assert (got - want).abs().max() <= 1e-4
        ours.rotary = Rotary(replace(ours.config, rope_scaling="default").rope())
        assert (ours(IDS) - want).abs().max() > 1e-2


def test_the_top_level_original_context_is_the_one_used(tmp_path):
    save_hf("llama-gqa", tmp_path)
    write_rope(tmp_path, WRITTEN["llama3-original-top"])
    assert read_llama_config(tmp_path).rope_original_max_len == 8
    write_rope(tmp_path, {"rope_scaling": {"rope_type": "llama3"} | LLAMA3})
    assert read_llama_config(tmp_path).rope_original_max_len == 16
    write_rope(tmp_path, {"rope_scaling": {"rope_type": "llama3", "factor": 8.0,
                                           "low_freq_factor": 1.0, "high_freq_factor": 4.0}})
    assert read_llama_config(tmp_path).rope_original_max_len == 64  # max_position_embeddings


DEFAULT = {"rope_parameters": {"rope_type": "default", "rope_theta": 1e4}}


@pytest.mark.parametrize("scaling, message", [
    ({"type": "dynamic", "factor": 2.0}, "rope_scaling type 'dynamic' is not implemented"),
    ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16},
     "rope_scaling type 'yarn' is not implemented"),
    ({"type": "longrope", "short_factor": [1.0], "long_factor": [2.0]},
     "rope_scaling type 'longrope' is not implemented"),
    ({"rope_type": "ntk-by-parts"}, "rope_scaling type 'ntk-by-parts' is unknown"),
    ({"rope_type": 3}, "rope_scaling: rope_type must be a string, got 3"),
    ({"type": "linear", "factor": -1}, r"rope_scaling: factor must be a finite number >= 1.0, "
                                       r"got -1 \(int\)"),
    ({"type": "linear", "factor": 0}, "factor must be a finite number >= 1.0, got 0"),
    ({"type": "linear", "factor": math.nan}, "factor must be a finite number >= 1.0, got nan"),
    ({"type": "linear"}, "rope_scaling: factor is missing"),
    ({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 0, "high_freq_factor": 4.0},
     "low_freq_factor must be a finite number > 0.0, got 0"),
    ({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 4.0, "high_freq_factor": 1.0},
     "high_freq_factor=1.0 must be above low_freq_factor=4.0"),
    ({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
      "original_max_position_embeddings": 1.5}, "original_max_position_embeddings must be an "
                                                "integer >= 1, got 1.5"),
    ({"rope_type": "linear", "factor": 2.0, "rope_theta": -5},
     "rope_theta must be a finite number > 0.0, got -5"),
    ({"rope_type": "linear", "factor": 2.0, "partial_rotary_factor": 0.5},
     "partial_rotary_factor=0.5 is not supported"),
    ({"full_attention": {"rope_type": "default"}}, "rope_scaling.full_attention is an object"),
    ("linear", "rope_scaling must be a JSON object or null, got 'linear'"),
])
def test_a_rope_scaling_beside_rope_parameters_that_we_do_not_compute_is_refused(
        tmp_path, scaling, message):
    """Beside a default ``rope_parameters`` (which transformers would not use), each is one
    line naming config.json, the key and the value, never default RoPE."""
    save_hf("llama-gqa", tmp_path)
    write_rope(tmp_path, DEFAULT | {"rope_scaling": scaling})
    with pytest.raises(UsageError, match=message) as err:
        read_llama_config(tmp_path)
    assert "config.json" in str(err.value) and "\n" not in str(err.value)


def test_an_empty_or_null_rope_scaling_leaves_rope_parameters_in_force(tmp_path):
    save_hf("llama-gqa", tmp_path)
    for empty in ({}, None):
        write_rope(tmp_path, WRITTEN["linear-parameters"] | {"rope_scaling": empty})
        c = read_llama_config(tmp_path)
        assert (c.rope_scaling, c.rope_factor, c.rope_theta) == ("linear", 4.0, 50.0)
