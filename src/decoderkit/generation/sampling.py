"""Sampling's shared pieces, for both families: temperature, top-k / top-p filtering, private
generators (one per row, so a row draws as it would alone) and the inverse-transform draw.

Legend: N rows, V vocabulary.
"""

from __future__ import annotations

import torch
from torch import Tensor

from decoderkit.base.errors import UsageError
from decoderkit.generation.limits import PerRow, check_seed


def tempered(logits: Tensor, temperature: float) -> Tensor:
    """(logits - max) / temperature, per row of (N, V): softmax(logits / temperature), whose
    largest entry stays 0 however small the temperature (unshifted, a low temperature can
    send every entry to -inf and the softmax to NaN); the others may become -inf."""
    return (logits - logits.amax(dim=-1, keepdim=True)) / temperature


def filter_logits(logits: Tensor, top_k: int = 0, top_p: float = 1.0) -> Tensor:
    """Keep the ``top_k`` largest logits (0: all), then the smallest set whose probability
    reaches ``top_p`` (nucleus); the rest become -inf. logits (N, V)."""
    if top_k > 0 and top_k < logits.size(-1):
        kth = logits.topk(top_k, dim=-1).values[:, -1:]  # (N, 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = logits.sort(dim=-1, descending=True)  # (N, V)
        probs = sorted_logits.softmax(dim=-1)
        before = probs.cumsum(dim=-1) - probs  # mass of strictly more likely tokens
        drop_sorted = before >= top_p  # the most likely token is always kept
        drop = torch.empty_like(drop_sorted).scatter_(1, order, drop_sorted)  # unsort
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def generators(seed: PerRow | None, batch: int,
               device: torch.device) -> list[torch.Generator]:
    """Sampling's private generators: one for the batch (``seed`` an int, or None: fresh), or
    one per row (a list/tuple of B seeds: row b draws as it would alone with seed b)."""
    per_row = isinstance(seed, (list, tuple))
    seeds = list(seed) if per_row else [seed]
    if per_row and len(seeds) != batch:
        raise UsageError(f"seed must be an int, None or one int per source row ({batch}), "
                         f"got {len(seeds)} values")
    gens = []
    for value in seeds:
        gen = torch.Generator(device=device)
        if check_seed(value) is None:
            gen.seed()  # a fresh non-deterministic seed, this generator only
        else:
            gen.manual_seed(value)
        gens.append(gen)
    return gens


def uniforms(gens: list[torch.Generator], n: int, device: torch.device) -> Tensor:
    """(n,) float64 numbers in [0, 1): all from ``gens[0]`` when it is alone, else number i from
    ``gens[i]`` (one each: row i's draw depends on its own generator only)."""
    if len(gens) == 1:
        return torch.rand(n, dtype=torch.float64, generator=gens[0], device=device)
    if len(gens) != n:
        raise ValueError(f"{len(gens)} generators for {n} rows: give one, or one per row")
    return torch.cat([torch.rand(1, dtype=torch.float64, generator=gen, device=device)
                      for gen in gens])


def draw(logits: Tensor, gens: list[torch.Generator], temperature: float, top_k: int,
         top_p: float) -> Tensor:
    """One token per row (N,) drawn from softmax(logits / temperature) (N, V) after top-k
    then top-p filtering, by inverse transform sampling: row n takes the first v whose
    cumulative probability (vocabulary order, float64) exceeds u_n times the row's total,
    u_n ~ U[0, 1) (``uniforms``: one number per row, not V), which picks v with probability
    p_v and never a p = 0 token. ``gens``: one generator for all rows, or one per row."""
    if temperature == 1.0 and top_k == 0 and top_p == 1.0:  # the softmax shifts by the max
        probs = logits.softmax(dim=-1)  # itself: the same bits as tempered's, one pass, not 3
    else:
        probs = filter_logits(tempered(logits, temperature), top_k, top_p).softmax(dim=-1)
    cdf = probs.double().cumsum(dim=-1)  # (N, V), non-decreasing (cast first: 2x cumsum's own)
    total = cdf[:, -1:]  # (N, 1), 1 up to rounding
    # below the total (u < 1, but u * total may round up to it), so some token's cdf exceeds it
    target = torch.minimum(uniforms(gens, len(cdf), cdf.device)[:, None] * total,
                           torch.nextafter(total, torch.zeros_like(total)))  # (N, 1)
    return torch.searchsorted(cdf, target, right=True)[:, 0]  # first v with cdf_v > target
