"""The decoder-only language model: the model with its config and presets (``model``) and
GPT-1's classifier (``classifier``), built from the shared blocks of ``nn.layers``."""

from decoderkit.base.moved import forward

__getattr__ = forward(__name__)  # the names the module nn/lm.py held (a warning each)
