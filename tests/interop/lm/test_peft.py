"""PEFT's adapter format both ways, against peft itself on the transformers base (tiny random
Llama, Qwen2 and GPT-2 directories written in the test): our adapter opened by
``PeftModel.from_pretrained`` gives our logits, an adapter peft saved gives peft's here; and
what is refused (another base's adapter, unsupported keys, an oversized file)."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from decoderkit.base.errors import UsageError
from decoderkit.interop.checkpoints import load_checkpoint
from decoderkit.interop.lm.peft import (
    ADAPTER_CONFIG,
    ADAPTER_WEIGHTS,
    load_adapter,
    read_adapter,
    write_adapter_files,
)
from decoderkit.nn.lm.lora import adapters, add_lora
from decoderkit.nn.lora import LoRAConfig

transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")
from interop.llama_helpers import save_hf  # noqa: E402 (needs transformers)

V = 96
IDS = torch.randint(0, V, (2, 20), generator=torch.Generator().manual_seed(1))
BOUND = 1e-4
TARGETS = {"llama-gqa": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                         "down_proj"],
           "qwen2-tied": ["q_proj", "v_proj", "down_proj"],
           "gpt2": ["c_attn", "c_proj", "c_fc"]}


def save_base(case: str, directory, **overrides):
    """transformers' model of ``case`` saved into ``directory`` (GPT-2: random weights)."""
    if case != "gpt2":
        return save_hf(case, directory, **overrides)
    torch.manual_seed(0)
    config = transformers.GPT2Config(**({"vocab_size": V, "n_positions": 64, "n_embd": 32,
                                         "n_layer": 2, "n_head": 4} | overrides))
    model = transformers.GPT2LMHeadModel(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.2 * torch.randn_like(p))
    model.save_pretrained(directory)
    return model


def randomise(named, seed=2, std=0.3):
    """Every lora_B of ``named`` (name, parameter) pairs N(0, std^2): a trained adapter."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in named:
            if "lora_B" in name:
                p.copy_(std * torch.randn(p.shape, generator=g))


@pytest.mark.parametrize("case", list(TARGETS))
@pytest.mark.parametrize("rslora", [False, True])
def test_our_adapter_opens_in_peft_with_our_logits(tmp_path, case, rslora):
    hf = save_base(case, tmp_path / "base")
    ours = load_checkpoint(tmp_path / "base").model
    lora = LoRAConfig(r=4, alpha=8, dropout=0.1, targets=tuple(TARGETS[case]), rslora=rslora)
    add_lora(ours, lora)
    randomise(ours.named_parameters())
    (tmp_path / "adapter").mkdir()
    write_adapter_files(tmp_path / "adapter", ours, lora, str(tmp_path / "base"))
    saved = json.loads((tmp_path / "adapter" / ADAPTER_CONFIG).read_text())
    assert saved["task_type"] == "CAUSAL_LM" and saved["use_rslora"] is rslora
    tuned = peft.PeftModel.from_pretrained(hf, tmp_path / "adapter").eval()
    with torch.no_grad():
        want, got, base = tuned(IDS).logits, ours.eval()(IDS), hf(IDS).logits
        with tuned.disable_adapter():
            base = tuned(IDS).logits
    assert (got - want).abs().max() <= BOUND
    assert (base - want).abs().max() > 100 * BOUND  # the adapter moves the logits


@pytest.mark.parametrize("case", list(TARGETS))
def test_an_adapter_peft_saved_opens_here_with_peft_logits(tmp_path, case):
    hf = save_base(case, tmp_path / "base")
    config = peft.LoraConfig(r=4, lora_alpha=16, lora_dropout=0.05, target_modules=TARGETS[case],
                             task_type="CAUSAL_LM", fan_in_fan_out=case == "gpt2")
    tuned = peft.get_peft_model(hf, config)
    randomise(tuned.named_parameters())
    tuned.save_pretrained(tmp_path / "adapter")
    ours = load_checkpoint(tmp_path / "base").model
    lora = load_adapter(tmp_path / "adapter", ours)
    assert (lora.r, lora.alpha, lora.dropout) == (4, 16, 0.05)
    assert all(not p.requires_grad for n, p in ours.named_parameters() if "lora_" not in n)
    with torch.no_grad():
        want, got = tuned.eval()(IDS).logits, ours.eval()(IDS)
    assert (got - want).abs().max() <= BOUND
    assert len(adapters(ours)) > 0


def test_a_target_modules_pattern_is_read_as_peft_reads_it(tmp_path):
    hf = save_base("llama-gqa", tmp_path / "base")
    config = peft.LoraConfig(r=2, lora_alpha=4, target_modules=r".*layers\.1\.self_attn\.[qv]_proj",
                             task_type="CAUSAL_LM")
    tuned = peft.get_peft_model(hf, config)
    randomise(tuned.named_parameters())
    tuned.save_pretrained(tmp_path / "adapter")
    ours = load_checkpoint(tmp_path / "base").model
    lora = load_adapter(tmp_path / "adapter", ours)
    assert lora.targets == ("model.layers.1.self_attn.q_proj", "model.layers.1.self_attn.v_proj")
    with torch.no_grad():
        assert (ours(IDS) - tuned.eval()(IDS).logits).abs().max() <= BOUND


def peft_adapter(tmp_path, case="llama-gqa", **overrides):
    """An adapter directory peft saved for ``case`` (random B)."""
    hf = save_base(case, tmp_path / f"base-{case}", **overrides)
    tuned = peft.get_peft_model(hf, peft.LoraConfig(r=4, lora_alpha=8, task_type="CAUSAL_LM",
                                                    target_modules=TARGETS[case]))
    randomise(tuned.named_parameters())
    tuned.save_pretrained(tmp_path / f"adapter-{case}")
    return tmp_path / f"adapter-{case}"


@pytest.mark.parametrize("base, says", [
    (("gpt2", {}), r"adapter_config.json: target_modules: this model has no linear '\w+' "
                   r"\(its linears: c_attn, c_proj, c_fc.*another base"),
    (("llama-gqa", {"num_hidden_layers": 3}), r"layers\.2\..* is missing .*fewer layers"),
    (("llama-gqa", {"intermediate_size": 64}), r"mlp\.down_proj\.lora_A\.weight' has shape "
                                               r"\(4, 48\), but r=4 .* needs \(4, 64\)")])
def test_an_adapter_of_another_base_is_refused_naming_the_difference(tmp_path, base, says):
    """An adapter of a 2-layer Llama (intermediate 48) onto GPT-2, 3 layers, a wider FFN."""
    adapter = peft_adapter(tmp_path)
    case, overrides = base
    save_base(case, tmp_path / "other", **overrides)
    other = load_checkpoint(tmp_path / "other").model
    with pytest.raises(UsageError, match=says):
        load_adapter(adapter, other)
    assert not adapters(other)  # refused before the model was touched


def test_a_tensor_of_a_module_the_model_lacks_is_refused_naming_it(tmp_path):
    adapter = peft_adapter(tmp_path)
    tensors = load_file(adapter / ADAPTER_WEIGHTS)
    tensors["base_model.model.model.layers.7.self_attn.q_proj.lora_A.weight"] = torch.zeros(4, 32)
    save_file(tensors, adapter / ADAPTER_WEIGHTS)
    model = load_checkpoint(tmp_path / "base-llama-gqa").model
    with pytest.raises(UsageError, match=r"'model\.layers\.7\.self_attn\.q_proj': the model has "
                                         r"no such linear \(2 layers, llama's names: q_proj"):
        load_adapter(adapter, model)


@pytest.mark.parametrize("key, value, says", [
    ("use_dora", True, "use_dora=True is not supported"),
    ("rank_pattern", {"q_proj": 2}, "rank_pattern=.* is not supported"),
    ("bias", "all", "bias must be one of"), ("peft_type", "IA3", "peft_type must be one of"),
    ("r", 0, "r must be an integer"), ("target_modules", 3, "target_modules must be"),
    ("task_type", "SEQ_CLS", "task_type must be")])
def test_adapter_config_keys_are_read_with_their_types_and_bounds(tmp_path, key, value, says):
    adapter = peft_adapter(tmp_path)
    raw = json.loads((adapter / ADAPTER_CONFIG).read_text())
    (adapter / ADAPTER_CONFIG).write_text(json.dumps(raw | {key: value}))
    with pytest.raises(UsageError, match=says):
        read_adapter(adapter)


def test_an_oversized_or_damaged_tensor_file_is_refused_before_it_is_read(tmp_path):
    adapter = peft_adapter(tmp_path)
    model = load_checkpoint(tmp_path / "base-llama-gqa").model
    tensors = load_file(adapter / ADAPTER_WEIGHTS)
    save_file(tensors | {"padding": torch.zeros(1 << 20)}, adapter / ADAPTER_WEIGHTS)
    with pytest.raises(UsageError, match="bytes, more than the"):
        load_adapter(adapter, model)
    name = next(iter(tensors))
    save_file(tensors | {name: torch.full_like(tensors[name], float("nan"))},
              adapter / ADAPTER_WEIGHTS)
    with pytest.raises(UsageError, match="non-finite"):
        load_adapter(adapter, load_checkpoint(tmp_path / "base-llama-gqa").model)
    (adapter / ADAPTER_WEIGHTS).write_bytes(b"\x00" * 10)
    with pytest.raises(UsageError, match="truncated or not a safetensors file"):
        load_adapter(adapter, model)
