"""Tiny random Hugging Face Llama-family models built in the test with ``transformers`` (nothing
downloaded), saved as directories: the references of tests/interop/llama and tests/nn."""

from __future__ import annotations

from pathlib import Path

import torch

LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 16, "rope_theta": 10000.0}
# name -> (model_type, config keys beyond the common ones): GQA and MQA, tied and untied heads,
# qwen2's q/k/v biases, qwen3's q/k norms and explicit head_dim, llama3 and linear scaling
CASES = {
    "llama-gqa": ("llama", {"num_key_value_heads": 2}),
    "llama-mqa-tied-llama3": ("llama", {"num_key_value_heads": 1, "tie_word_embeddings": True,
                                        "rope_parameters": LLAMA3}),
    "llama-linear": ("llama", {"num_key_value_heads": 4, "rope_parameters": {
        "rope_type": "linear", "factor": 2.0, "rope_theta": 500.0}}),
    "mistral": ("mistral", {"num_key_value_heads": 2, "sliding_window": 48}),
    "qwen2-tied": ("qwen2", {"num_key_value_heads": 2, "tie_word_embeddings": True}),
    "qwen3": ("qwen3", {"num_key_value_heads": 2, "head_dim": 16}),
}
COMMON = {"vocab_size": 96, "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2,
          "num_attention_heads": 4, "max_position_embeddings": 64, "rms_norm_eps": 1e-5,
          "tie_word_embeddings": False, "bos_token_id": None, "eos_token_id": None}


def hf_model(case: str, seed: int = 0, **overrides):
    """The transformers model of ``case`` (float32, eval), its matrices 8x their initialisation
    (varied, decided continuations) and its norms' scales off 1 (a mis-mapped norm shows)."""
    import transformers

    kind, keys = CASES[case]
    config_type = {"llama": transformers.LlamaConfig, "mistral": transformers.MistralConfig,
                   "qwen2": transformers.Qwen2Config, "qwen3": transformers.Qwen3Config}[kind]
    torch.manual_seed(seed)
    model_type = {"llama": transformers.LlamaForCausalLM,
                  "mistral": transformers.MistralForCausalLM,
                  "qwen2": transformers.Qwen2ForCausalLM,
                  "qwen3": transformers.Qwen3ForCausalLM}[kind]
    model = model_type(config_type(**(COMMON | keys | overrides))).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1 + 0.2 * torch.randn_like(p))
            elif p.dim() > 1:
                p.mul_(8.0)
            else:
                p.copy_(0.5 * torch.randn_like(p))  # qwen2's q/k/v biases
    return model


def save_hf(case: str, directory: Path, seed: int = 0, **overrides):
    """``hf_model(case, seed)`` saved into ``directory``; returns the model."""
    model = hf_model(case, seed, **overrides)
    model.save_pretrained(directory)
    return model



def save_padded(directory: Path, end_of_text: bool = False):
    """A llama directory whose config has more rows than its character tokenizer has tokens
    (padding, as Qwen2.5's and nanoGPT's), its head rigged so that a padded row wins every
    argmax (``conftest.rig_padding``). Returns the tokenizer, saved as its tokenizer.json;
    with ``end_of_text``, GPT-2's <|endoftext|> its last token and not saved (a character
    vocabulary's file holds single characters: an export writes it)."""
    from conftest import rig_padding
    from decoderkit.text.lm.tokenizer import END_OF_TEXT, LMTokenizer

    tokenizer = LMTokenizer.characters("to be, or not to be: that is the question")
    if end_of_text:
        tokenizer.hf.add_special_tokens([END_OF_TEXT])
    n = tokenizer.vocab_size
    model = hf_model("llama-gqa", vocab_size=n + 2 * COMMON["hidden_size"])
    rig_padding(model.lm_head.weight, n)
    model.save_pretrained(directory)
    if not end_of_text:
        tokenizer.save(Path(directory) / "tokenizer.json")
    return tokenizer
