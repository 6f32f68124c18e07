"""decoderkit: the encoder-decoder Transformer and the decoder-only LM (GPT), exact to the
textbook formulas.

Masks are bool with True = may attend, as ``F.scaled_dot_product_attention``.
"""

from .base import moved
from .generation.lm.complete import generate
from .nn.packing import prepack
from .generation.seq2seq.decoding import Generation, greedy_decode, sample
from .generation.seq2seq.search import beam_search
from .interop.gpt.classifier import export_classifier
from .nn.attention import MultiHeadAttention, attention
from .nn.cache import KVCache
from .nn.cross_cache import DecoderCache
from .nn.cache import KVCache as LMCache  # the LM's cache of 0.2, now the one KVCache
from .nn.lm.classifier import ClassifierConfig, GPTClassifier, transform, with_new_tokens
from .nn.embeddings import Generator, PositionalEncoding, TokenEmbedding, sinusoidal_encoding
from .nn.exercise import transformer_decoder
from .nn.ffn import PositionwiseFeedForward
from .nn.layers import (
    BlockSpec,
    CausalStack,
    Decoder,
    DecoderLayer,
    Encoder,
    EncoderLayer,
    Residual,
    SelfAttentionLayer,
)
from .nn.norms import AnnotatedLayerNorm, LayerNorm
from .nn.lm.model import DecoderOnlyLM, LMConfig
from .nn.lm.presets import lm_preset
from .nn.masks import (
    causal_mask,
    from_torch_mask,
    padding_mask,
    target_mask,
    to_additive,
    to_torch_mask,
)
from .nn.seq2seq.model import EncoderDecoder, ModelConfig, make_model
from .report.params import count_parameters, decoder_layer_parameters, parameter_breakdown
from .interop.checkpoints import load_checkpoint
from .training.seq2seq.checkpoint import Checkpoint, save_checkpoint
from .training.lm.finetune import FinetuneConfig, finetune
from .training.lm.labelled import (
    ClassifierMetrics,
    Labelled,
    classify,
    evaluate_classifier,
    read_tsv,
)
from .text.lm.tokenizer import LMTokenizer
from .training.objective import LabelSmoothingLoss, noam_rate
from .text.seq2seq.tokenizer import Tokenizer

moved.install()  # the old import paths (base.moved.MOVED) answer with the moved modules

__all__ = [
    "AnnotatedLayerNorm", "BlockSpec", "CausalStack", "Checkpoint", "ClassifierConfig",
    "ClassifierMetrics", "Decoder", "DecoderCache", "DecoderLayer", "DecoderOnlyLM", "Encoder",
    "EncoderDecoder", "EncoderLayer", "FinetuneConfig", "GPTClassifier", "Generation", "Generator",
    "KVCache", "LMCache", "LMConfig", "LMTokenizer", "LabelSmoothingLoss", "Labelled", "LayerNorm",
    "ModelConfig", "MultiHeadAttention", "PositionalEncoding", "PositionwiseFeedForward",
    "Residual", "SelfAttentionLayer", "TokenEmbedding", "Tokenizer", "attention", "beam_search",
    "causal_mask", "classify", "count_parameters", "decoder_layer_parameters",
    "evaluate_classifier", "export_classifier", "finetune", "from_torch_mask", "generate",
    "greedy_decode", "lm_preset", "load_checkpoint", "make_model", "noam_rate", "padding_mask",
    "parameter_breakdown", "prepack", "read_tsv", "sample", "save_checkpoint",
    "sinusoidal_encoding", "target_mask", "to_additive", "to_torch_mask", "transform",
    "transformer_decoder", "with_new_tokens",
]
