"""The references and known mistakes of the items outside the block family: positional
encoding, embeddings, the Annotated Transformer's label smoothing, the warm-up rate and the
decode loops. Each function takes a mistake name (None = the reference) and computes in
float64; decoderkit's own modules are the references the items compare against, these
functions are the mistakes' arithmetic (and are tested equal to the library at None).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from decoderkit.grade.run.child.scripted import scripted_next

BOS, EOS = 1, 2  # seed 004's token ids (the scripted models use the same)


def positional_table(length: int, d: int, mistake: str | None = None) -> Tensor:
    """(length, d): PE(p, 2i) = sin(p w_i), PE(p, 2i+1) = cos(p w_i), or a mistake."""
    pos = torch.arange(length, dtype=torch.float64)[:, None]  # (L, 1)
    if mistake == "pe_frequency":  # w_c = 10000^(-c/d) for every channel c
        omega = 10000.0 ** (-torch.arange(d, dtype=torch.float64) / d)
        even = torch.arange(d) % 2 == 0
        return torch.where(even, torch.sin(pos * omega), torch.cos(pos * omega))
    omega = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)  # (d/2,)
    sin, cos = torch.sin(pos * omega), torch.cos(pos * omega)  # (L, d/2) each
    if mistake == "pe_swapped":
        sin, cos = cos, sin
    if mistake == "pe_not_interleaved":
        return torch.cat([sin, cos], dim=1)
    table = torch.empty(length, d, dtype=torch.float64)
    table[:, 0::2], table[:, 1::2] = sin, cos
    return table


def embedding_scale(d: int, mistake: str | None = None) -> float:
    """The factor on lut(x): sqrt(d), or a mistake's."""
    return {None: math.sqrt(d), "embed_not_scaled": 1.0,
            "embed_divided": 1.0 / math.sqrt(d)}[mistake]


def at_label_smoothing(log_probs: Tensor, target: Tensor, padding_idx: int, smoothing: float,
                       mistake: str | None = None) -> tuple[Tensor, Tensor]:
    """The Annotated Transformer's LabelSmoothing: (true_dist (N, V), KL-divergence sum).

    smoothing / (V - 2) on every class, 1 - smoothing on the gold one, the padding column
    and the rows whose target is padding set to 0.
    """
    V = log_probs.size(1)
    spread = {None: V - 2, "ls_over_v": V, "ls_over_v_minus_1": V - 1, "ls_pad_kept": V - 2}
    dist = torch.full(log_probs.shape, smoothing / spread[mistake], dtype=torch.float64)
    dist.scatter_(1, target[:, None], 1.0 - smoothing)
    if mistake != "ls_pad_kept":
        dist[:, padding_idx] = 0.0
    dist[target == padding_idx] = 0.0
    lp = log_probs.double()
    terms = torch.where(dist > 0, dist * (dist.clamp_min(1e-300).log() - lp),
                        torch.zeros_like(dist))
    return dist, terms.sum()


def rate(step: int, model_size: int, factor: float, warmup: int,
         mistake: str | None = None) -> float:
    """factor d^(-1/2) min(s^(-1/2), s w^(-3/2)) with s = max(step, 1), or a mistake's."""
    s = max(step, 1)
    width = model_size ** (-1.0 if mistake == "rate_d_exponent" else -0.5)
    ramp = s * warmup ** (-0.5 if mistake == "rate_warmup_exponent" else -1.5)
    return factor * width * min(s ** -0.5, ramp)


def decode_tokens(start: int, steps: int, vocab: int, eos_at: int, stop_at_eos: bool,
                  mistake: str | None = None) -> list[int]:
    """The ids a greedy loop over the scripted model returns: start, then up to ``steps``
    tokens, stopping after EOS when ``stop_at_eos``, or what a mistaken loop returns."""
    ids = [start]
    stop = stop_at_eos and mistake != "decode_ignores_eos"
    for _ in range(steps - 1 if mistake == "decode_drops_last" and not stop else steps):
        context = ids[-1:] if mistake == "decode_last_token_only" else ids
        token = scripted_next(context, vocab, eos_at)
        ids.append(token)
        if stop and token == EOS:
            break
    if mistake == "decode_drops_last" and stop and ids[-1] == EOS:
        ids.pop()
    return ids
