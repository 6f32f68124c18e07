"""Decoder-only generation: ``generate``, the rows of continuous batching (one row per
request, each at its own position), their choice of token and their stop rules."""

from decoderkit.base.moved import forward

__getattr__ = forward(__name__)  # the names the module at this path held before
