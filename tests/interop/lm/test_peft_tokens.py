"""New tokens in PEFT's format (trainable_token_indices) both ways, against peft on the
transformers base (resized by one token, as a PEFT user resizes to the adapter's tokenizer):
an adapter peft saved opens here (the base grown, the token's rows its values) with peft's
logits, ours opens in peft with ours; ids and layers that do not fit are refused."""

from __future__ import annotations

import json

import pytest
import torch

from decoderkit.base.errors import UsageError
from decoderkit.interop.checkpoints import load_checkpoint
from decoderkit.interop.lm.peft import merge_adapter, write_adapter_files
from decoderkit.nn.lm.classifier import with_new_tokens
from decoderkit.nn.lm.lora import add_lora, add_token_rows, token_rows
from decoderkit.nn.lora import LoRAConfig

transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")
from interop.llama_helpers import save_hf  # noqa: E402 (needs transformers)

V, BOUND = 96, 1e-4
IDS = torch.tensor([[3, 17, V, 40, 9, V, 12]])  # the new token among old ones
CASES = {"qwen2-tied": {"embed_tokens": [V]},
         "llama-gqa": {"embed_tokens": [V], "lm_head": [V]}}


def randomise(model, seed=2):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name or "trainable_tokens_delta" in name or ".values" in name:
                p.copy_(0.5 * torch.randn(p.shape, generator=g))


@pytest.mark.parametrize("case", list(CASES))
def test_an_adapter_peft_saved_with_a_new_token_opens_here_with_peft_logits(tmp_path, case):
    hf = save_hf(case, tmp_path / "base")
    hf.resize_token_embeddings(V + 1)
    tuned = peft.get_peft_model(hf, peft.LoraConfig(
        r=4, target_modules=["q_proj", "v_proj"], trainable_token_indices=CASES[case]))
    randomise(tuned)
    tuned.save_pretrained(tmp_path / "adapter")
    ours = merge_adapter(tmp_path / "adapter", load_checkpoint(tmp_path / "base").model)
    assert ours.config.vocab_size == V + 1 and not token_rows(ours)  # grown, merged
    with torch.no_grad():
        want, got = tuned.eval()(IDS).logits, ours(IDS)
        with tuned.disable_adapter():
            base = tuned(IDS).logits
    assert (got - want).abs().max() <= BOUND
    assert (base - want).abs().max() > 100 * BOUND


@pytest.mark.parametrize("case", list(CASES))
def test_our_adapter_with_a_new_token_opens_in_peft_with_our_logits(tmp_path, case):
    hf = save_hf(case, tmp_path / "base")
    ours = with_new_tokens(load_checkpoint(tmp_path / "base").model, 1).eval()
    lora = LoRAConfig(r=4)
    add_lora(ours, lora)
    add_token_rows(ours, [V])
    randomise(ours)
    (tmp_path / "adapter").mkdir()
    write_adapter_files(tmp_path / "adapter", ours, lora, str(tmp_path / "base"))
    saved = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    assert saved["trainable_token_indices"] == CASES[case]
    hf.resize_token_embeddings(V + 1)
    tuned = peft.PeftModel.from_pretrained(hf, tmp_path / "adapter").eval()
    with torch.no_grad():
        want, got = tuned(IDS).logits, ours(IDS)
    assert (got - want).abs().max() <= BOUND


@pytest.mark.parametrize("indices,message", [
    ({"embed_tokens": [V, V + 1], "lm_head": [V, V + 1]}, r"has shape \(1, 32\), but its "
                                                         r"trainable tokens .* need \(2, 32\)"),
    ({"embed_tokens": [V]}, "holds trainable tokens of a layer trainable_token_indices does "
                            "not name"),
    ({"wte": [V]}, r"names 'wte', which this model has no trainable tokens in "
                   r"\(its: embed_tokens, lm_head\)"),
    ({"embed_tokens": [V], "lm_head": [V - 1]}, "gives its layers different ids"),
    ({"embed_tokens": [-1]}, r"must be 1 to 4096 token ids in \[0, 16777216\)"),
    ({"embed_tokens": "all"}, "must be 1 to 4096 token ids"),
], ids=["two-ids-one-row", "lm_head-left-out", "another-layer", "different-ids", "negative",
        "not-a-list"])
def test_token_indices_are_read_as_foreign_values(tmp_path, indices, message):
    save_hf("llama-gqa", tmp_path / "base")
    ours = with_new_tokens(load_checkpoint(tmp_path / "base").model, 1).eval()
    lora = LoRAConfig(r=2)
    add_lora(ours, lora)
    add_token_rows(ours, [V])
    (tmp_path / "adapter").mkdir()
    write_adapter_files(tmp_path / "adapter", ours, lora, None)
    file = tmp_path / "adapter" / "adapter_config.json"
    file.write_text(json.dumps(json.loads(file.read_text()) | {
        "trainable_token_indices": indices}))
    with pytest.raises(UsageError, match=message):
        merge_adapter(tmp_path / "adapter", load_checkpoint(tmp_path / "base").model)
