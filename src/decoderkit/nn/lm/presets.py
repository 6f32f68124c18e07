"""The LM's shapes by name (``lm_preset``): GPT-1, the GPT-2 sizes, nanoGPT, the Llama block at a
CPU size, and the published shapes of the Llama-family models decoderkit opens (as litgpt's
``Config.from_name``), each the config ``interop.llama.hf`` reads from that model's
config.json (tests/nn/lm/test_presets.py holds those files' values).
"""

from __future__ import annotations

from dataclasses import replace

from decoderkit.base.checks import MODEL_SIZES, check_choice
from decoderkit.base.config import replace_given
from decoderkit.nn.lm.model import LMConfig, ffn_width

CONTEXT = MODEL_SIZES["max_len"].high  # a longer published context is read as this many


_GPT2 = LMConfig(vocab_size=50257)  # LMConfig's defaults are GPT-2 small's: 124,439,808 params
# the Llama block of every published shape: RMSNorm, RoPE, SwiGLU, no biases, no dropout
_LLAMA = replace(_GPT2, positions="rope", activation="swish", bias=False, norm="rms",
                 ffn="gated", dropout=0.0)


def _published(vocab: int, layers: int, d: int, heads: int, kv: int, ff: int, context: int,
               theta: float, **more) -> LMConfig:
    """A published shape: config.json's sizes, context (at most ``CONTEXT``) and rope_theta."""
    return replace(_LLAMA, vocab_size=vocab, n_layers=layers, d_model=d, n_heads=heads,
                   n_kv_heads=None if kv == heads else kv, d_ff=ff,
                   max_len=min(context, CONTEXT), rope_theta=theta, **more)


_QWEN = dict(norm_eps=1e-6, tie_head=True)
_LLAMA3 = dict(rope_scaling="llama3", rope_factor=32.0, rope_low_freq_factor=1.0,
               rope_high_freq_factor=4.0, rope_original_max_len=8192)
PUBLISHED_SHAPES = {  # name: (vocab, layers, d_model, heads, kv heads, d_ff, context, rope_theta)
    "smollm2-135m": _published(49152, 30, 576, 9, 3, 1536, 8192, 100000.0, tie_head=True),
    "smollm2-360m": _published(49152, 32, 960, 15, 5, 2560, 8192, 100000.0, tie_head=True),
    "smollm2-1.7b": _published(49152, 24, 2048, 32, 32, 8192, 8192, 130000.0, tie_head=True),
    "qwen2.5-0.5b": _published(151936, 24, 896, 14, 2, 4864, 32768, 1e6, qkv_bias=True,
                               **_QWEN),
    "qwen2.5-1.5b": _published(151936, 28, 1536, 12, 2, 8960, 131072, 1e6, qkv_bias=True,
                               **_QWEN),
    "qwen3-0.6b": _published(151936, 28, 1024, 16, 8, 3072, 40960, 1e6, head_dim=128,
                             qk_norm=True, **_QWEN),
    "llama3.2-1b": _published(128256, 16, 2048, 32, 8, 8192, 131072, 500000.0, tie_head=True,
                              **_LLAMA3),
}


def _gpt2(n_layers: int, d_model: int, n_heads: int) -> LMConfig:
    return replace(_GPT2, n_layers=n_layers, d_model=d_model, n_heads=n_heads, d_ff=4 * d_model)


_PRESETS = {
    # GPT-1 (OpenAIGPTLMHeadModel): post-norm, no final LayerNorm, 40,478 BPE tokens, 512 context
    "gpt1": replace(_GPT2, vocab_size=40478, max_len=512, norm_first=False),
    "gpt2": _GPT2,
    "gpt2-medium": _gpt2(24, 1024, 16),
    "gpt2-large": _gpt2(36, 1280, 20),
    "gpt2-xl": _gpt2(48, 1600, 25),
    # nanoGPT's model.py defaults: GPT-2 small with exact-erf GELU, vocabulary padded to 50,304
    "nanogpt": replace(_GPT2, vocab_size=50304, activation="gelu", dropout=0.0),
    # the Llama block at nanoGPT's CPU size (4 x 128, trains on two cores): RMSNorm, RoPE,
    # SwiGLU at 8/3 d (rounded to 8), 2 key/value heads for 4 query heads, no biases
    "llama": replace(_GPT2, vocab_size=32000, n_layers=4, d_model=128, n_heads=4,
                     d_ff=ffn_width("gated", 128),
                     max_len=256, dropout=0.0, positions="rope", activation="swish",
                     bias=False, norm="rms", ffn="gated", n_kv_heads=2),
    **PUBLISHED_SHAPES,
}
PRESETS = tuple(_PRESETS)


def lm_preset(name: str, *, vocab_size: int | None = None, n_layers: int | None = None,
              d_model: int | None = None, n_heads: int | None = None, d_ff: int | None = None,
              max_len: int | None = None, dropout: float | None = None,
              norm_first: bool | None = None, positions: str | None = None,
              activation: str | None = None, bias: bool | None = None,
              tie_head: bool | None = None, scale_embeddings: bool | None = None) -> LMConfig:
    """The preset ``name`` (one of ``PRESETS``) with each field given here (not None) replaced.

    The keywords are the fields of decoderkit 0.1, kept for code written then; any field,
    a newer one too, is set with ``dataclasses.replace(lm_preset(name), field=value)``.
    """
    changes = dict(locals())  # the keywords as given (the first statement: nothing else yet)
    name = changes.pop("name")
    check_choice("preset", name, PRESETS)
    return replace_given(_PRESETS[name], changes)
