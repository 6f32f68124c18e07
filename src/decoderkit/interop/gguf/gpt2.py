"""GPT-2-shaped LMs as llama.cpp's ``gpt2`` architecture: pre-norm blocks with LayerNorms and
biases, learned positions, the tanh GELU, packed q/k/v (``blk.N.attn_qkv``: q, k, v rows, as
our ``in_proj`` packs them), an untied head as ``output.weight`` (a tied one is left out:
llama.cpp then reads ``token_embd``). Biases a bias=False model lacks are written as zeros."""

from __future__ import annotations

from pathlib import Path

import torch

from decoderkit.base.errors import UsageError
from decoderkit.interop.gguf.writer import (
    Architecture,
    bpe_vocabulary,
    numpy32,
    write_gguf,
)
from decoderkit.interop.gpt.hf import LAYER_NORM_EPS, check_exportable
from decoderkit.nn.lm import DecoderOnlyLM
from decoderkit.training.lm.tokenizer import LMTokenizer

ARCH = "gpt2"
# our block's parameter -> llama.cpp's (blk.N.<name>)
BLOCK = {"res1.norm": "attn_norm", "self_attn.in_proj": "attn_qkv",
         "self_attn.out_proj": "attn_output", "res2.norm": "ffn_norm", "ffn.w_1": "ffn_up",
         "ffn.w_2": "ffn_down"}


def gpt2_architecture(model: DecoderOnlyLM) -> Architecture:
    """``model``'s tensors under llama.cpp's gpt2 names and its hyperparameters; a model the
    architecture cannot hold (post-norm, sinusoidal positions, another activation) refused."""
    c = model.config
    check_exportable(c)
    if c.activation != "gelu_tanh":
        raise UsageError(f"llama.cpp's gpt2 architecture computes the tanh GELU; this model's "
                         f"activation is {c.activation!r}")
    ours = model.state_dict()

    def get(name: str) -> torch.Tensor:
        if name in ours:
            return ours[name]
        rows = ours[name.replace(".bias", ".weight")].shape[0]  # bias=False: zeros
        return torch.zeros(rows)

    tensors = {"token_embd.weight": get("embed.lut.weight"),
               "position_embd.weight": get("pos.table.weight")}
    for i in range(c.n_layers):
        for mine, theirs in BLOCK.items():
            for p in ("weight", "bias"):
                tensors[f"blk.{i}.{theirs}.{p}"] = get(f"blocks.layers.{i}.{mine}.{p}")
    tensors |= {f"output_norm.{p}": get(f"blocks.norm.{p}") for p in ("weight", "bias")}
    if not c.tie_head:
        tensors["output.weight"] = get("generator.proj.weight")

    def hparams(writer) -> None:
        writer.add_context_length(c.max_len)
        writer.add_embedding_length(c.d_model)
        writer.add_feed_forward_length(c.d_ff)
        writer.add_block_count(c.n_layers)
        writer.add_head_count(c.n_heads)
        writer.add_layer_norm_eps(LAYER_NORM_EPS)

    return Architecture(ARCH, hparams, {k: numpy32(v) for k, v in tensors.items()})


def export_gpt2_gguf(model: DecoderOnlyLM, tokenizer: LMTokenizer, out: str | Path,
                     kind: str = "float32", overwrite: bool = False,
                     chat_template: str | None = None) -> Path:
    """Write ``out``/model.gguf for llama.cpp (``kind``: float32, float16 or q8_0) and the
    manifest, atomically."""
    if not isinstance(model, DecoderOnlyLM):
        raise TypeError(f"model must be a DecoderOnlyLM, got {type(model).__name__}")
    arch = gpt2_architecture(model)
    vocabulary = bpe_vocabulary(tokenizer, model.config.vocab_size)
    manifest = {"config": model.config.to_dict()}
    return write_gguf(out, overwrite, arch, vocabulary, kind, manifest, chat_template)
