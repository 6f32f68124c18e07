"""GPT-2-shaped LMs as llama.cpp's ``gpt2`` architecture: pre-norm blocks with LayerNorms and
biases, learned positions, the tanh GELU, packed q/k/v (``blk.N.attn_qkv``: q, k, v rows, as
our ``in_proj`` packs them), an untied head as ``output.weight`` (a tied one is left out:
llama.cpp then reads ``token_embd``). Biases a bias=False model lacks are written as zeros."""

from __future__ import annotations

import torch

from decoderkit.base.errors import UsageError
from decoderkit.base.moved import forward
from decoderkit.interop.gguf.writer import (
    Architecture,
    add_shape,
    numpy32,
)
from decoderkit.interop.gpt.hf import check_exportable
from decoderkit.interop.lm.architectures import LMArchitecture
from decoderkit.nn.lm.model import DecoderOnlyLM

# our block's parameter -> llama.cpp's (blk.N.<name>)
BLOCK = {"res1.norm": "attn_norm", "self_attn.in_proj": "attn_qkv",
         "self_attn.out_proj": "attn_output", "res2.norm": "ffn_norm", "ffn.w_1": "ffn_up",
         "ffn.w_2": "ffn_down"}

__getattr__ = forward(__name__)  # its ARCH: interop.lm.architectures.GPT2


def gpt2_architecture(model: DecoderOnlyLM, row: LMArchitecture) -> Architecture:
    """``model``'s tensors under llama.cpp's gpt2 names (``row``: the table's gpt2) and its
    hyperparameters; a model the architecture cannot hold (post-norm, sinusoidal positions,
    another activation) refused."""
    c = model.config
    check_exportable(c)
    for name, want in (("activation", "gelu_tanh"), ("norm", "standard"), ("ffn", "mlp"),
                       ("n_kv_heads", None), ("head_dim", None), ("qkv_bias", None),
                       ("qk_norm", False)):
        if getattr(c, name) != want:
            raise UsageError(f"llama.cpp's gpt2 architecture cannot express {name}="
                             f"{getattr(c, name)!r} (needs {want!r})")
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
        add_shape(writer, c)
        writer.add_layer_norm_eps(c.norm_eps)

    return Architecture(row.name, hparams, {k: numpy32(v) for k, v in tensors.items()})
