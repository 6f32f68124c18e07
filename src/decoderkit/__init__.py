"""decoderkit: the encoder-decoder Transformer, exact to the textbook formulas.

Masks are bool with True = may attend, as ``F.scaled_dot_product_attention``.
"""

from .attention import KVCache, MultiHeadAttention, attention
from .checkpoint import Checkpoint, load_checkpoint, save_checkpoint
from .decoding import Generation, greedy_decode, sample
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
from .packing import prepack
from .params import count_parameters, decoder_layer_parameters, parameter_breakdown
from .search import beam_search
from .tokenizer import Tokenizer
from .training import LabelSmoothingLoss, noam_rate

__all__ = [
    "AnnotatedLayerNorm", "Checkpoint", "Decoder", "DecoderCache", "DecoderLayer", "Encoder",
    "EncoderDecoder", "EncoderLayer", "Generation", "Generator", "KVCache", "LayerNorm",
    "LabelSmoothingLoss", "ModelConfig", "MultiHeadAttention", "PositionalEncoding",
    "PositionwiseFeedForward",
    "Residual", "TokenEmbedding", "Tokenizer", "attention", "beam_search", "causal_mask",
    "count_parameters", "decoder_layer_parameters", "from_torch_mask", "greedy_decode",
    "load_checkpoint", "make_model", "noam_rate", "padding_mask", "parameter_breakdown",
    "prepack", "sample", "save_checkpoint",
    "sinusoidal_encoding", "target_mask", "to_additive", "to_torch_mask",
    "transformer_decoder",
]
