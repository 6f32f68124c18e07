"""nn.lm.presets: each published shape is the config decoderkit reads from that model's own
config.json (its Hugging Face keys and values, as published, below)."""

from __future__ import annotations

import pytest

from decoderkit.base.errors import UsageError
from decoderkit.interop.llama.hf import llama_config
from decoderkit.nn.lm.presets import CONTEXT, PRESETS, PUBLISHED_SHAPES, lm_preset

_SMOL = dict(model_type="llama", vocab_size=49152, hidden_act="silu", rms_norm_eps=1e-5,
             max_position_embeddings=8192, tie_word_embeddings=True, attention_bias=False,
             mlp_bias=False)
_QWEN = dict(vocab_size=151936, hidden_act="silu", rms_norm_eps=1e-6, rope_theta=1000000.0,
             tie_word_embeddings=True, use_sliding_window=False)
CONFIG_JSON = {  # the config.json of each model's Hugging Face repository
    "smollm2-135m": _SMOL | dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                                 num_attention_heads=9, num_key_value_heads=3,
                                 rope_theta=100000.0),
    "smollm2-360m": _SMOL | dict(hidden_size=960, intermediate_size=2560, num_hidden_layers=32,
                                 num_attention_heads=15, num_key_value_heads=5,
                                 rope_theta=100000.0),
    "smollm2-1.7b": _SMOL | dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=24,
                                 num_attention_heads=32, num_key_value_heads=32,
                                 rope_theta=130000.0),
    "qwen2.5-0.5b": _QWEN | dict(model_type="qwen2", hidden_size=896, intermediate_size=4864,
                                 num_hidden_layers=24, num_attention_heads=14,
                                 num_key_value_heads=2, max_position_embeddings=32768,
                                 sliding_window=32768),
    "qwen2.5-1.5b": _QWEN | dict(model_type="qwen2", hidden_size=1536, intermediate_size=8960,
                                 num_hidden_layers=28, num_attention_heads=12,
                                 num_key_value_heads=2, max_position_embeddings=131072,
                                 sliding_window=131072),
    "qwen3-0.6b": _QWEN | dict(model_type="qwen3", hidden_size=1024, intermediate_size=3072,
                               num_hidden_layers=28, num_attention_heads=16,
                               num_key_value_heads=8, head_dim=128, attention_bias=False,
                               max_position_embeddings=40960, sliding_window=None),
    "llama3.2-1b": dict(model_type="llama", vocab_size=128256, hidden_size=2048,
                        intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
                        num_key_value_heads=8, head_dim=64, hidden_act="silu",
                        rms_norm_eps=1e-5, max_position_embeddings=131072, rope_theta=500000.0,
                        rope_scaling=dict(rope_type="llama3", factor=32.0, low_freq_factor=1.0,
                                          high_freq_factor=4.0,
                                          original_max_position_embeddings=8192),
                        tie_word_embeddings=True, attention_bias=False, mlp_bias=False),
}


def test_every_published_shape_has_its_config_json():
    assert set(PUBLISHED_SHAPES) == set(CONFIG_JSON) and set(PUBLISHED_SHAPES) <= set(PRESETS)


@pytest.mark.parametrize("name", sorted(CONFIG_JSON))
def test_a_published_preset_is_what_its_config_json_reads_as(name):
    assert lm_preset(name) == llama_config(f"{name}/config.json", CONFIG_JSON[name])


def test_a_context_past_the_bound_is_read_at_the_bound():
    assert lm_preset("llama3.2-1b").max_len == CONTEXT < 131072
    assert lm_preset("qwen3-0.6b").max_len == 40960


def test_an_unknown_preset_is_named():
    with pytest.raises(UsageError, match="qwen3-0.6b"):
        lm_preset("no-such-model")
