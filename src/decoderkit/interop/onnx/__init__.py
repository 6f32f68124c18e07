"""ONNX: the encoder-decoder's graphs exported, and ONNX Runtime as an engine."""

from decoderkit.base.moved import forward

__getattr__ = forward(__name__)  # the names the module at this path held before
