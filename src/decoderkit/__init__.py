"""decoderkit: the encoder-decoder Transformer, exact to the textbook formulas.

Masks are bool with True = may attend, as ``F.scaled_dot_product_attention``.
"""

from .attention import KVCache, MultiHeadAttention, attention
from .embeddings import Generator, PositionalEncoding, TokenEmbedding, sinusoidal_encoding
from .exercise import transformer_decoder
from .layers import (
    AnnotatedLayerNorm,
    Decoder,
    DecoderLayer,
    Encoder,
    EncoderLayer,
    LayerNorm,
    PositionwiseFeedForward,
    Residual,
)
from .masks import (
    causal_mask,
    from_torch_mask,
    padding_mask,
    target_mask,
    to_additive,
    to_torch_mask,
)
from .model import DecoderCache, EncoderDecoder, ModelConfig, make_model
from .params import count_parameters, decoder_layer_parameters, parameter_breakdown

__all__ = [
    "AnnotatedLayerNorm", "Decoder", "DecoderCache", "DecoderLayer", "Encoder",
    "EncoderDecoder", "EncoderLayer", "Generator", "KVCache", "LayerNorm", "ModelConfig",
    "MultiHeadAttention", "PositionalEncoding", "PositionwiseFeedForward", "Residual",
    "TokenEmbedding", "attention", "causal_mask", "count_parameters",
    "decoder_layer_parameters", "from_torch_mask", "make_model", "padding_mask",
    "parameter_breakdown", "sinusoidal_encoding", "target_mask", "to_additive",
    "to_torch_mask", "transformer_decoder",
]
