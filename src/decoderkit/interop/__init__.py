"""Other engines' formats: PyTorch's ``nn.Transformer`` modules (and exports to serving engines).

The two-way interchange with ``nn.Transformer`` is importable from here, as in 0.1:
``from decoderkit.interop import from_torch, to_torch``.
"""

from decoderkit.interop.torch_nn import TransformerCore, from_torch, to_torch

__all__ = ["TransformerCore", "from_torch", "to_torch"]
