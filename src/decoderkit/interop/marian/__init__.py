"""Marian's models: Hugging Face's Marian (opus-mt) directories and Marian's own ``.npz``,
opened exactly and exported back."""

from decoderkit.base.moved import forward

__getattr__ = forward(__name__)  # the names the module at this path held before
