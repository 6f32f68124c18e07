"""The public API and the on-disk format survive the move into subpackages."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import decoderkit
from decoderkit import EncoderDecoder, ModelConfig, load_checkpoint, padding_mask, target_mask

# decoderkit.__all__ of version 0.1.0, before the subpackages: every name must still import.
NAMES_0_1 = (
    "AnnotatedLayerNorm", "Checkpoint", "Decoder", "DecoderCache", "DecoderLayer", "Encoder",
    "EncoderDecoder", "EncoderLayer", "Generation", "Generator", "KVCache", "LayerNorm",
    "LabelSmoothingLoss", "ModelConfig", "MultiHeadAttention", "PositionalEncoding",
    "PositionwiseFeedForward", "Residual", "TokenEmbedding", "Tokenizer", "attention",
    "beam_search", "causal_mask", "count_parameters", "decoder_layer_parameters",
    "from_torch_mask", "greedy_decode", "load_checkpoint", "make_model", "noam_rate",
    "padding_mask", "parameter_breakdown", "prepack", "sample", "save_checkpoint",
    "sinusoidal_encoding", "target_mask", "to_additive", "to_torch_mask", "transformer_decoder",
)
FIXTURE = Path(__file__).parent / "fixtures" / "checkpoint_0.1"  # written by version 0.1.0


@pytest.mark.parametrize("name", NAMES_0_1)
def test_every_name_of_the_old_public_api_imports_from_the_top(name):
    namespace: dict = {}
    exec(f"from decoderkit import {name}", namespace)  # the statement a user writes
    assert namespace[name] is getattr(decoderkit, name)
    assert name in decoderkit.__all__


def test_a_checkpoint_written_by_version_0_1_loads_with_its_weights():
    ckpt = load_checkpoint(FIXTURE)
    config = ModelConfig.from_dict(json.loads((FIXTURE / "config.json").read_text()))
    assert ckpt.config == config
    saved = load_file(FIXTURE / "model.safetensors")
    state = ckpt.model.state_dict()
    for key, tensor in saved.items():
        assert torch.equal(state[key], tensor), key
    # the loaded model computes what a model built from the same files computes
    torch.manual_seed(1)
    peer = EncoderDecoder(config).eval()
    peer.load_state_dict(saved, strict=False)
    src = torch.tensor([ckpt.src_tokenizer.encode("29 Nov 2026")])
    tgt = torch.tensor([[config.bos_id, 5, 6]])
    with torch.no_grad():
        ours = ckpt.model(src, tgt, padding_mask(src, 0), target_mask(tgt, 0))
        want = peer(src, tgt, padding_mask(src, 0), target_mask(tgt, 0))
    assert torch.equal(ours, want)
