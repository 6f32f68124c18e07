"""The decoder-only family re-derived for grading: decoderkit's ``DecoderOnlyLM`` holding a
learner's GPT weights (the reference), the float64 arithmetic of the mistakes, and the ids a
sampling or cached loop returns on the scripted LMs.

A block is pre-norm: x + Attn(LN1 x), then x + MLP(LN2 x), MLP = W2 GELU(W1 x); the model
is LN_f(blocks(E[ids] + P[pos])) W_head^T. Legend: B batch, T positions, d width, V vocab.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
from torch import Tensor

from decoderkit.grade.reference import blocks
from decoderkit.grade.run.child.scripted import cached_logits, scripted_logits
from decoderkit.nn.ffn import gelu_tanh
from decoderkit.nn.lm.model import DecoderOnlyLM, LMConfig


@dataclass(frozen=True)
class GSpec:
    """One member of the GPT family; each field is a place a learner can go wrong."""

    causal: str = "causal"  # "causal" (j <= i) or the blocks.visibility kinds ("none", ...)
    scale: str = "sqrt_dk"  # attention scale, as blocks.Spec
    gelu: str = "erf"  # "erf" (nanoGPT, nn.GELU()) or "tanh" (GPT-2's gelu_new)
    norm: str = "pre"  # "pre": x + F(LN x); "post": LN(x + F(x)); "pre_on_normed"
    final_norm: bool = True  # LN_f before the head
    embed_scale: bool = False  # token embeddings times sqrt(d)
    positions: bool = True  # the position embedding added (False: the missing positional signal)
    only: int | None = None  # ``norm`` acts in this sublayer only (0 attention, 1 MLP)

    def but(self, **changes) -> GSpec:
        return replace(self, **changes)


@dataclass(frozen=True)
class BlockW:
    """One GPT block's weights (math orientation for the MLP: x W1, W1 (d, f))."""

    ln1: tuple[Tensor, Tensor]
    attn: blocks.Projections
    ln2: tuple[Tensor, Tensor]
    w1: Tensor
    b1: Tensor
    w2: Tensor
    b2: Tensor


@dataclass(frozen=True)
class GPTW:
    """A whole model's weights."""

    wte: Tensor  # (V, d)
    wpe: Tensor  # (L, d)
    layers: tuple[BlockW, ...]
    ln_f: tuple[Tensor, Tensor] | None  # None: the learner has no final norm at all
    head: Tensor  # (V, d)


def reference(w: GPTW, gelu: str) -> DecoderOnlyLM:
    """decoderkit's DecoderOnlyLM (float64, eval) holding the learner's weights."""
    f = w.layers[0].w1.shape[1]
    cfg = LMConfig(vocab_size=w.wte.shape[0], n_layers=len(w.layers), d_model=w.wte.shape[1],
                   n_heads=w.layers[0].attn.heads, d_ff=f, max_len=w.wpe.shape[0], dropout=0.0,
                   activation="gelu" if gelu == "erf" else "gelu_tanh", tie_head=False)
    lm = DecoderOnlyLM(cfg).double().eval()
    d = w.wte.shape[1]
    one, zero = torch.ones(d, dtype=torch.float64), torch.zeros(d, dtype=torch.float64)
    new = {"embed.lut.weight": w.wte, "pos.table.weight": w.wpe,
           "generator.proj.weight": w.head}
    new["blocks.norm.weight"], new["blocks.norm.bias"] = w.ln_f or (one, zero)
    for i, b in enumerate(w.layers):
        at, p = f"blocks.layers.{i}.", b.attn
        new[at + "self_attn.in_proj.weight"] = torch.cat([p.wq, p.wk, p.wv])
        new[at + "self_attn.in_proj.bias"] = torch.cat([p.bq, p.bk, p.bv])
        new[at + "self_attn.out_proj.weight"], new[at + "self_attn.out_proj.bias"] = p.wo, p.bo
        new[at + "ffn.w_1.weight"], new[at + "ffn.w_1.bias"] = b.w1.T, b.b1
        new[at + "ffn.w_2.weight"], new[at + "ffn.w_2.bias"] = b.w2.T, b.b2
        for j, (gamma, beta) in ((1, b.ln1), (2, b.ln2)):
            new[at + f"res{j}.norm.weight"], new[at + f"res{j}.norm.bias"] = gamma, beta
    lm.load_state_dict(new)
    return lm


def causal_attention(x: Tensor, p: blocks.Projections, spec: GSpec) -> Tensor:
    """Multi-head self-attention of x (B, T, d) under the spec's visibility."""
    T = x.size(-2)
    s = blocks.Spec(causal=spec.causal, scale=spec.scale)
    return blocks.multi_head(x, x, blocks.visibility(T, T, spec.causal), p, s)


def gpt_block(x: Tensor, b: BlockW, spec: GSpec) -> Tensor:
    """x + Attn(LN1 x), then x + MLP(LN2 x), or a variant (x (B, T, d))."""
    act = gelu_tanh if spec.gelu == "tanh" else torch.nn.functional.gelu
    s = [blocks.Spec(norm=spec.norm if spec.only in (None, i) else "pre") for i in (0, 1)]
    x = blocks.residual_stage(x, lambda u: blocks.layer_norm(u, *b.ln1, s[0]),
                              lambda h: causal_attention(h, b.attn, spec), s[0])
    return blocks.residual_stage(x, lambda u: blocks.layer_norm(u, *b.ln2, s[1]),
                                 lambda h: act(h @ b.w1 + b.b1) @ b.w2 + b.b2, s[1])


def gpt_logits(ids: Tensor, w: GPTW, spec: GSpec) -> Tensor:
    """ids (B, T) -> logits (B, T, V), or a variant."""
    d = w.wte.shape[1]
    x = w.wte[ids] * (math.sqrt(d) if spec.embed_scale else 1.0)
    if spec.positions:
        x = x + w.wpe[:ids.size(1)]
    for b in w.layers:
        x = gpt_block(x, b, spec)
    if spec.final_norm and w.ln_f is not None:
        x = blocks.layer_norm(x, *w.ln_f, blocks.Spec())
    return x @ w.head.T


def sample(prompt: list[int], steps: int, temperature: float, top_k: int | None, vocab: int,
           block_size: int, seed: int) -> list[int]:
    """The ids a generate loop returns on the scripted LM: crop to block_size, logits of the
    last position / temperature, keep the top k, softmax, one torch.multinomial draw per
    step after torch.manual_seed(seed) (the global generator, restored afterwards)."""
    ids = list(prompt)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for _ in range(steps):
            logits = scripted_logits(ids[-block_size:], vocab, torch)[None] / temperature
            if top_k is not None:
                v, _ = torch.topk(logits, min(top_k, vocab))
                logits = logits.masked_fill(logits < v[:, [-1]], -math.inf)
            probs = torch.softmax(logits, dim=-1)  # (1, V)
            ids.append(int(torch.multinomial(probs, num_samples=1)))
    return ids


def cached_greedy(prompt: list[int], steps: int, vocab: int, restart: int | None = None
                  ) -> list[int]:
    """The ids a greedy loop on the scripted cached LM returns: the prompt in one call at
    position 0, then each new token at the next position; ``restart``: every new token
    claims that position instead (the index not advanced with the cache)."""
    seen = [[t, p] for p, t in enumerate(prompt)]
    ids = list(prompt)
    for _ in range(steps):
        token = int(cached_logits(seen, vocab, torch).argmax())
        ids.append(token)
        seen.append([token, len(seen) if restart is None else restart])
    return ids
