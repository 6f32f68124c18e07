"""A float32 Llama-shaped LM serving two LoRA adapters beside its base (``MultiLoRALinear``),
and each adapter alone as a ``LoRALinear`` model (the reference): for the tests of rows,
routing and the server."""

from __future__ import annotations

import copy
import dataclasses

import torch

from decoderkit.nn.lm.lora import adapters, add_lora, add_multi_lora, take_lora
from decoderkit.nn.lm.model import DecoderOnlyLM
from decoderkit.nn.lm.presets import lm_preset
from decoderkit.nn.lora import LoRAConfig

V = 50
LLAMA = dataclasses.replace(lm_preset("llama"), vocab_size=V, n_layers=2, d_model=32,
                            n_heads=4, n_kv_heads=2, d_ff=64, max_len=48)
# "a": Llama's q_proj and v_proj (two row parts of the packed in_proj), "b": every linear
LORAS = {"a": LoRAConfig(r=4, alpha=8.0), "b": LoRAConfig(r=2, targets=("all-linear",))}


def base_lm(seed: int = 0, config=LLAMA) -> DecoderOnlyLM:
    """A float32 LM, its matrices 8x its initialisation's (varied, decided continuations)."""
    torch.manual_seed(seed)
    model = DecoderOnlyLM(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(8.0 if p.dim() > 1 else 1.0)
    return model


def randomise(model: DecoderOnlyLM, seed: int, std: float = 0.5) -> None:
    """Every lora_B of ``model`` N(0, std^2): a trained adapter, which moves the tokens."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for layer in adapters(model).values():
            for b in layer.lora_B.values():
                b.copy_(std * torch.randn(b.shape, generator=g))


def served_and_alone(seed: int = 0) -> tuple[DecoderOnlyLM, dict[str, DecoderOnlyLM]]:
    """(the base holding both adapters of ``LORAS``, {name: that adapter alone on a copy of
    the base, as ``LoRALinear``s; None: the base itself})."""
    model, alone, layers = base_lm(seed), {}, {}
    alone[None] = copy.deepcopy(model)
    for k, (name, lora) in enumerate(LORAS.items()):
        add_lora(model, lora)
        randomise(model, seed + 1 + k)
        alone[name] = copy.deepcopy(model)
        layers[name] = take_lora(model)
    add_multi_lora(model, layers)
    return model, alone


GPT2 = dataclasses.replace(lm_preset("gpt2"), vocab_size=V, n_layers=2, d_model=32, n_heads=4,
                           d_ff=64, max_len=48, dropout=0.0)
