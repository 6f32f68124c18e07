"""LoRA on the LM's linears by Hugging Face names: the targets (PEFT's matching, all-linear,
the defaults), the model at step 0 and merged, against the merged weights computed by hand;
two adapters on one base, each row routed to its own."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from decoderkit.base.errors import UsageError
from decoderkit.nn.lm.model import DecoderOnlyLM
from decoderkit.nn.lm.presets import lm_preset
from decoderkit.nn.lm.lora import (
    adapted,
    adapters,
    add_lora,
    add_multi_lora,
    linear_names,
    merge_lora,
    resolve_targets,
    take_lora,
)
from decoderkit.nn.lora import LoRAConfig, routed, trainable

LLAMA = dataclasses.replace(lm_preset("llama"), vocab_size=40, n_layers=2, d_model=32,
                            n_heads=4, n_kv_heads=2, d_ff=48, max_len=32)
GPT2 = dataclasses.replace(lm_preset("gpt2"), vocab_size=40, n_layers=2, d_model=32, n_heads=4,
                           d_ff=64, max_len=32, dropout=0.0)


def model_of(config, seed=0):
    torch.manual_seed(seed)
    return DecoderOnlyLM(config).double().eval()


def randomise_b(model, seed=1):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in adapters(model).values():
            for b in m.lora_B.values():
                b.copy_(torch.randn(b.shape, generator=g, dtype=b.dtype))


def test_linear_names_are_transformers_modules_with_their_rows():
    llama = linear_names(LLAMA)
    q, kv = 32, 16
    assert llama["model.layers.1.self_attn.k_proj"].module == "blocks.layers.1.self_attn.in_proj"
    assert (llama["model.layers.1.self_attn.k_proj"].start,
            llama["model.layers.1.self_attn.k_proj"].end) == (q, q + kv)
    assert llama["model.layers.0.mlp.up_proj"].module == "blocks.layers.0.ffn.w_3"
    assert len(llama) == 2 * 7
    gpt2 = linear_names(GPT2)
    assert gpt2["transformer.h.0.attn.c_attn"].end == 96
    assert gpt2["transformer.h.1.mlp.c_proj"].module == "blocks.layers.1.ffn.w_2"
    assert len(gpt2) == 2 * 4


@pytest.mark.parametrize("config, targets, want", [
    (LLAMA, None, {"q_proj", "v_proj"}), (GPT2, None, {"attn.c_attn"}),
    (LLAMA, ("all-linear",), {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                              "down_proj"}),
    (GPT2, ("all-linear",), {"attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"}),
    (GPT2, ("c_proj",), {"attn.c_proj", "mlp.c_proj"}), (GPT2, ("mlp.c_proj",), {"mlp.c_proj"}),
    (LLAMA, r".*\.1\.self_attn\.q_proj", {"q_proj"})])
def test_targets_match_as_peft_matches_target_modules(config, targets, want):
    """A name is a full module name or its ending after a dot; a string is a regular
    expression of the full name; all-linear is every linear (the head is none of them)."""
    found = resolve_targets(config, targets)
    parts = 1 if config is LLAMA else 2
    assert {".".join(n.split(".")[-parts:]) for n in found} == want
    layers = {n.split(".")[2] for n in found}
    assert layers == ({"1"} if isinstance(targets, str) else {"0", "1"})


def test_a_target_the_model_lacks_is_refused_naming_its_linears():
    with pytest.raises(UsageError, match=r"no linear 'c_attn' \(its linears: q_proj, k_proj, "
                                         r"v_proj, o_proj, gate_proj, up_proj, down_proj"):
        resolve_targets(LLAMA, ("q_proj", "c_attn"))
    with pytest.raises(UsageError, match="r must be in \\[1, 16\\] for model.layers.0.self_attn"
                                         ".k_proj"):
        add_lora(model_of(LLAMA), LoRAConfig(r=17, targets=("k_proj",)))


@pytest.mark.parametrize("config", [LLAMA, GPT2], ids=["llama", "gpt2"])
def test_step_zero_is_the_base_and_merging_is_the_hand_merged_model(config):
    model, ids = model_of(config), torch.randint(0, 40, (2, 9))
    want = model(ids)
    lora = LoRAConfig(r=4, alpha=8, targets=("all-linear",))
    chosen = add_lora(model, lora)
    assert torch.equal(model(ids), want)  # B = 0: the base exactly
    randomise_b(model)
    adapted_logits = model(ids).detach()
    assert not torch.allclose(adapted_logits, want, atol=1e-3)  # the adapters matter
    hand = model_of(config)  # the same base, merged by hand: W[rows] += s B A
    state = hand.state_dict()
    for name, (layer, part) in adapted(model).items():
        slot = chosen[name]
        delta = lora.scale * layer.lora_B[part].detach() @ layer.lora_A[part].detach()
        state[f"{slot.module}.weight"][slot.start:slot.end] += delta
    torch.testing.assert_close(adapted_logits, hand(ids), rtol=1e-10, atol=1e-10)
    merged = merge_lora(model)
    assert not adapters(merged)
    assert set(merged.state_dict()) == set(hand.state_dict())
    torch.testing.assert_close(merged(ids), hand(ids), rtol=1e-10, atol=1e-10)


def test_only_the_adapters_train_and_a_second_adapter_is_refused():
    model = model_of(LLAMA)
    add_lora(model, LoRAConfig(r=2))
    names = {n for n, p in model.named_parameters() if p.requires_grad}
    assert names and all(".lora_" in n for n in names)
    assert len(trainable(model)) == 2 * 2 * 2  # 2 layers x (q, v) x (A, B)
    with pytest.raises(UsageError, match="adapters already"):
        add_lora(model, LoRAConfig(r=2))


@pytest.mark.parametrize("config", [LLAMA, GPT2], ids=["llama", "gpt2"])
def test_two_adapters_on_one_base_route_each_row_to_its_own(config):
    """take_lora leaves the base as it was; add_multi_lora with both adapters: a routed
    forward computes each row as that adapter's LoRALinear model does (float64, to rounding),
    a base row as the base exactly; unrouted, the base."""
    import copy

    model = model_of(config)
    ids = torch.randint(0, 40, (3, 7), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        plain = model(ids)
    alone, layers = {}, {}
    for k, (name, lora) in enumerate({"x": LoRAConfig(r=2),
                                      "y": LoRAConfig(r=3, targets=("all-linear",))}.items()):
        add_lora(model, lora)
        randomise_b(model, seed=k + 1)
        alone[name] = copy.deepcopy(model)
        layers[name] = take_lora(model)
        assert not adapters(model)
    with torch.no_grad():
        assert torch.equal(model(ids), plain)
    add_multi_lora(model, layers)
    with pytest.raises(UsageError, match="adapters already"):
        add_multi_lora(model, layers)
    route = ["x"] * 7 + [None] * 7 + ["y"] * 7  # row by row, each of its 7 positions
    with torch.no_grad(), routed(model, route):
        got = model(ids)
    with torch.no_grad():
        torch.testing.assert_close(got[0], alone["x"](ids)[0], rtol=1e-10, atol=1e-10)
        torch.testing.assert_close(got[2], alone["y"](ids)[2], rtol=1e-10, atol=1e-10)
        assert (got[0] - plain[0]).abs().max() > 1e-2 and (got[2] - plain[2]).abs().max() > 1e-2
        assert torch.equal(got[1], plain[1]) and torch.equal(model(ids), plain)
