"""Self-consistency checks of the decoder-only LM against its peers, for ``conformance``:
Hugging Face GPT-2 and OpenAI GPT loaded from a directory written here with random weights, a
nanoGPT ``ckpt.pt`` written here in nanoGPT's format from those weights, and the cache
against the full forward. Float64; each check needs ``transformers`` (without it, a ``skip``
row naming it, from ``conformance.run_checks``). Nothing is downloaded.

Legend: B batch, T length, V vocabulary size.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import torch

from decoderkit.generation.lm.complete import generate
from decoderkit.report.rows import Row, equal, near

IDS = torch.tensor([[5, 17, 3, 42, 8, 8, 60, 1, 29], [0, 33, 12, 7, 50, 2, 9, 14, 21]])  # (B, T)
SHAPE = dict(vocab_size=61, n_positions=64, n_embd=16, n_layer=2, n_head=4)
CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")


def _peer(kind: str, **options):
    """A small float64 HF model (import of transformers here: its absence is a skip row),
    every parameter N(0, 0.3^2) from a fixed generator."""
    import transformers

    if kind == "openai-gpt":
        model = transformers.OpenAIGPTLMHeadModel(transformers.OpenAIGPTConfig(**SHAPE))
    else:
        model = transformers.GPT2LMHeadModel(transformers.GPT2Config(**SHAPE, **options))
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(0.3 * torch.randn(p.shape, generator=g, dtype=torch.float64))
    return model.double().eval()


def _logits(model, ids: torch.Tensor = IDS) -> torch.Tensor:
    with torch.no_grad():
        out = model(ids)
    return out if isinstance(out, torch.Tensor) else out.logits  # (B, T, V)


def _through_directory(peer):
    """``peer`` saved with save_pretrained and read back by ``interop.gpt.hf``."""
    from decoderkit.interop.gpt.hf import load_hf_gpt

    with tempfile.TemporaryDirectory() as tmp:
        peer.save_pretrained(tmp)
        return load_hf_gpt(tmp)[0]


def consistency_hf_gpt2() -> Iterator[Row]:
    """HF GPT2LMHeadModel parity (logits, greedy tokens), float64"""
    peer = _peer("gpt2", tie_word_embeddings=False)
    ours = _through_directory(peer)
    yield near("self", "HF GPT-2 directory: logits = GPT2LMHeadModel", _logits(peer),
               _logits(ours), 1e-12)
    with torch.no_grad():
        want = peer.generate(IDS[:1, :5], max_new_tokens=20, min_new_tokens=20,
                             do_sample=False, pad_token_id=0, eos_token_id=None)[0, 5:]
    yield equal("self", "HF GPT-2: 20 greedy tokens = generate", want.tolist(),
                generate(ours, [IDS[0, :5].tolist()], max_new_tokens=20, greedy=True)[0])


def consistency_openai_gpt() -> Iterator[Row]:
    """HF OpenAIGPTLMHeadModel (GPT-1) parity (logits), float64"""
    peer = _peer("openai-gpt")
    yield near("self", "OpenAI GPT dir: logits = OpenAIGPTLMHeadModel",
               _logits(peer), _logits(_through_directory(peer)), 1e-12)


def consistency_nanogpt() -> Iterator[Row]:
    """nanoGPT ckpt.pt parity (logits = GPT2LMHeadModel with exact GELU), float64"""
    from decoderkit.interop.gpt.nanogpt import load_nanogpt

    peer = _peer("gpt2", activation_function="gelu")  # nanoGPT's arithmetic
    state = {f"_orig_mod.{k}": v.t().contiguous() if k.endswith(CONV1D) else v
             for k, v in peer.state_dict().items()}  # nn.Linear layout, as torch.compile saves
    args = dict(n_layer=2, n_head=4, n_embd=16, block_size=64, bias=True, vocab_size=61,
                dropout=0.0)
    with tempfile.TemporaryDirectory() as tmp:
        torch.save({"model": state, "model_args": args, "iter_num": 0}, Path(tmp) / "ckpt.pt")
        ours, _ = load_nanogpt(tmp)
    yield near("self", "nanoGPT ckpt.pt: logits = GPT2LMHeadModel(gelu)", _logits(peer),
               _logits(ours), 1e-12)


def consistency_lm_cache() -> Iterator[Row]:
    """Decoder-only LM: cached steps = HF's full forward at every position, float64"""
    peer = _peer("gpt2")
    ours = _through_directory(peer)
    with torch.no_grad():
        cache = ours.new_cache(IDS.size(0), IDS.size(1))
        prefill = ours(IDS[:, :4], cache, cache.at(0, 4))  # the prompt, then a token a step
        steps = [ours(IDS[:, t:t + 1], cache, cache.at(t)) for t in range(4, IDS.size(1))]
    yield near("self", "LM: prefill + cached steps = full forward", 0.0,
               (torch.cat([prefill, *steps], 1) - _logits(peer)).abs().max(), 1e-12)


LLAMA_SHAPE = dict(vocab_size=61, hidden_size=16, intermediate_size=24, num_hidden_layers=2,
                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 8, "rope_theta": 10000.0}


def consistency_hf_llama() -> Iterator[Row]:
    """HF LlamaForCausalLM (GQA, llama3 RoPE) and Qwen3ForCausalLM (q/k norms) parity, float64
    to 1e-6: transformers' RMSNorm computes in float32 whatever the dtype (ours in the input's:
    measured 1-2e-7 apart), and both compute RoPE's angles in float32"""
    import transformers

    from decoderkit.interop.llama.hf import load_llama

    peers = (("Llama (GQA, llama3 RoPE)", transformers.LlamaForCausalLM(
                 transformers.LlamaConfig(**LLAMA_SHAPE, rope_parameters=LLAMA3))),
             ("Qwen3 (q/k norms)", transformers.Qwen3ForCausalLM(
                 transformers.Qwen3Config(**LLAMA_SHAPE, head_dim=8))))
    for name, peer in peers:
        g = torch.Generator().manual_seed(0)
        with torch.no_grad():
            for p in peer.parameters():
                p.copy_(0.3 * torch.randn(p.shape, generator=g, dtype=torch.float64))
        peer = peer.double().eval()
        with tempfile.TemporaryDirectory() as tmp:
            peer.save_pretrained(tmp)
            ours = load_llama(tmp)[0]
        yield near("self", f"HF {name}: logits = transformers'", _logits(peer), _logits(ours),
                   1e-6)
