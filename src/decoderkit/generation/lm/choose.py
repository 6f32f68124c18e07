"""The running rows' next tokens, chosen at once (continuous batching's sampling step).

The rows' next-token logits (B, V) lose the ids at or past each row's ``usable_vocab`` (a
model's rows past its tokenizer's, padding: -inf, so no penalty, filter or argmax can pick one;
``usable_vocab()`` is the one rule of that size), then get each row's logit bias (one indexed
add for all rows) and presence / frequency penalties (OpenAI's: logit - frequency * count -
presence * [count > 0]); then greedy rows take the argmax and the others are drawn
(``decoding.draw``) in groups of equal (temperature, top_k, top_p), each row with its own
generator. One call serves a group, yet every op in it works row by row (elementwise, or a
reduction, sort or search along V; the draw takes one uniform number per row from the row's
generator), so a row's token is the one it gets alone whatever rows keep it company.

Legend: B rows, V vocabulary.
"""

from __future__ import annotations

from typing import Protocol

import torch
from torch import Tensor

from decoderkit.generation.sampling import draw


class Settings(Protocol):
    """What choosing reads of a row's settings (``lm_row.Settings`` has these fields)."""

    greedy: bool
    temperature: float
    top_k: int
    top_p: float
    logit_bias: tuple[tuple[int, float], ...]
    presence_penalty: float
    frequency_penalty: float
    usable_vocab: int | None


def usable_vocab(model_rows: int, tokenizer_size: int | None) -> int:
    """The ids generation may choose and list: the model's rows, but none past its tokenizer's
    (Qwen2.5: 151,936 rows, 151,665 tokens; nanoGPT pads GPT-2's 50,257 to 50,304)."""
    return model_rows if tokenizer_size is None else min(model_rows, tokenizer_size)


def usable_logits(logits: Tensor, vocab: int | None) -> Tensor:
    """A row's logits (..., V) over the ids it may list (``usable_vocab``): its first columns."""
    return logits if vocab is None else logits[..., :vocab]


def adjusted_logits(logits: Tensor, settings: list[Settings],
                    counts: list[Tensor | None]) -> Tensor:
    """logits (B, V), -inf at or past each row's ``usable_vocab``, plus its ``logit_bias``,
    minus its penalties on ``counts[b]`` (V,) (times each token was generated; None: none
    yet); ``logits`` itself when no row has any."""
    V = logits.size(-1)
    limits = [V if s.usable_vocab is None else min(s.usable_vocab, V) for s in settings]
    bias = [(b, token, value) for b, s in enumerate(settings) for token, value in s.logit_bias]
    penalised = [b for b, c in enumerate(counts) if c is not None]
    if not bias and not penalised and min(limits) == V:
        return logits
    adjusted = logits.clone()
    if min(limits) < V:
        columns = torch.arange(V, device=logits.device)  # (V,)
        past = columns >= torch.tensor(limits, device=logits.device)[:, None]  # (B, V)
        adjusted.masked_fill_(past, -torch.inf)
    if bias:
        rows, ids, values = zip(*bias, strict=True)
        adjusted.index_put_((torch.tensor(rows, device=logits.device),
                             torch.tensor(ids, device=logits.device)),
                            torch.tensor(values, dtype=logits.dtype, device=logits.device),
                            accumulate=True)
    for b in penalised:
        s, c = settings[b], counts[b]
        adjusted[b] = adjusted[b] - s.frequency_penalty * c - s.presence_penalty * (c > 0)
    return adjusted


def choose(logits: Tensor, settings: list[Settings], gens: list[list[torch.Generator] | None],
           counts: list[Tensor | None]) -> list[int]:
    """Each row's next id from its logits (B, V): argmax of the adjusted logits for a greedy
    row, else a draw with its own generator ``gens[b][0]``."""
    adjusted, groups = adjusted_logits(logits, settings, counts), {}
    for b, s in enumerate(settings):
        groups.setdefault(None if s.greedy else (s.temperature, s.top_k, s.top_p), []).append(b)
    chosen = [0] * len(settings)
    for key, rows in groups.items():
        part = adjusted if len(rows) == len(settings) else adjusted[rows]  # (b, V)
        ids = part.argmax(dim=-1) if key is None else \
            draw(part, [gens[b][0] for b in rows], *key)
        for b, token in zip(rows, ids.tolist(), strict=True):
            chosen[b] = token
    return chosen
