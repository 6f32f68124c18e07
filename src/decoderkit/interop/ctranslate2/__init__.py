"""CTranslate2: the translator export and engine, its files, and the LM's Generator engine."""

from decoderkit.base.moved import forward

__getattr__ = forward(__name__)  # the names the module at this path held before
