"""Text generation with a decoder-only LM: the prompt in one forward (prefill), then one token
a step on the key/value cache; greedy or sampled with ``decoding``'s filters and generators.

Prompts of different lengths share one batch left-padded: each row's positions start at its
first real token and its padding is never attended to (``DecoderOnlyLM.features``), so a row
gives the tokens it would give alone.

The context (``config.max_len`` = C positions): the model never sees more than the last C
tokens, as nanoGPT's ``generate`` (which crops ``idx[:, -block_size:]``). A prompt longer than
C is cropped to its last C tokens; once prompt + generated tokens reach C, each further token
is computed from the last C tokens by a fresh prefill of that window (a sliding window whose
cache is recomputed every step: exact, the same tokens as recomputing without any cache, at
the cost of a C-token forward per step).

Legend: B batch, L padded prompt length, C context length, V vocabulary size.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from decoderkit.base.errors import UsageError
from decoderkit.generation.decoding import draw, generators
from decoderkit.generation.limits import PerRow, check_int, check_sampling, logits_dtype
from decoderkit.generation.step import evaluating
from decoderkit.nn.lm import DecoderOnlyLM, LMCache

OnStep = Callable[[int, list[int]], object]  # (step, the B tokens just chosen)


def check_prompts(model: DecoderOnlyLM, prompts: list[list[int]]) -> list[list[int]]:
    """The prompts as lists of ints, unless one is empty or holds an id outside the vocabulary
    (a UsageError naming the prompt, the position and the id)."""
    if not isinstance(model, DecoderOnlyLM):
        raise TypeError(f"model must be a DecoderOnlyLM, got {type(model).__name__}")
    if not isinstance(prompts, (list, tuple)) or not prompts:
        raise UsageError("prompts must be a non-empty list of token-id lists")
    V = model.config.vocab_size
    for i, prompt in enumerate(prompts):
        if not isinstance(prompt, (list, tuple)) or not prompt:
            raise UsageError(f"prompt {i} must be a non-empty list of token ids, got {prompt!r}")
        for j, t in enumerate(prompt):
            if isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < V:
                raise UsageError(f"prompt {i}, position {j}: token id {t!r} is outside the "
                                 f"vocabulary [0, {V})")
    return [list(p) for p in prompts]


def generate(model: DecoderOnlyLM, prompts: list[list[int]], *, max_new_tokens: int,
             temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0, greedy: bool = False,
             seed: PerRow | None = None, on_step: OnStep | None = None) -> list[list[int]]:
    """``max_new_tokens`` new tokens after each prompt; returns them per prompt.

    greedy: y_t = argmax_v logits; else a draw from softmax(logits / temperature) filtered by
    top-k then top-p (``decoding.draw``). ``seed``: an int for the batch, one per prompt (each
    then samples as it would alone with its seed), or None (fresh). ``on_step(step, tokens)``
    is called with the B tokens of each step as soon as they are chosen (streaming).
    See the module docstring for what happens beyond the context length.
    """
    prompts = check_prompts(model, prompts)
    check_int("max_new_tokens", max_new_tokens, 1)
    check_sampling(temperature, top_k, top_p, logits_dtype(model))
    if not isinstance(greedy, bool):
        raise UsageError(f"greedy must be a bool, got {greedy!r}")
    if on_step is not None and not callable(on_step):
        raise TypeError(f"on_step must be callable as on_step(step, tokens), got {on_step!r}")
    C = model.config.max_len
    prompts = [p[-C:] for p in prompts]  # the model sees at most the last C tokens
    L, B = max(map(len, prompts)), len(prompts)
    device = model.embed.lut.weight.device
    pad = torch.tensor([L - len(p) for p in prompts], device=device)  # (B,) left padding
    seq = torch.tensor([[0] * (L - len(p)) + p for p in prompts], device=device)  # (B, L)
    gens = None if greedy else generators(seed, B, device)
    out = []
    with evaluating(model), torch.inference_mode():
        cache = _cache(model, B, min(C, L + max_new_tokens - 1), pad)
        logits = _last_logits(model, seq, cache)  # (B, V): the prefill
        for step in range(max_new_tokens):
            token = logits.argmax(dim=-1) if greedy else draw(logits, gens, temperature, top_k,
                                                              top_p)  # (B,)
            out.append(token)
            if on_step is not None:
                on_step(step, token.tolist())
            if step + 1 == max_new_tokens:
                break
            seq = torch.cat([seq, token[:, None]], dim=1)  # (B, L + step + 1)
            if cache.length < cache.capacity:
                logits = _last_logits(model, token[:, None], cache)
            else:  # the context is full: the last C tokens, prefilled afresh
                cut = seq.size(1) - C
                cache = _cache(model, B, C, (pad - cut).clamp_min(0))
                logits = _last_logits(model, seq[:, cut:], cache)
    return torch.stack(out, dim=1).tolist()  # (B, max_new_tokens)


def _cache(model: DecoderOnlyLM, batch: int, capacity: int, pad: Tensor) -> LMCache:
    """An empty cache; the padding mask only where some row is padded."""
    return model.new_cache(batch, capacity, start=pad if bool(pad.any()) else None)


def _last_logits(model: DecoderOnlyLM, ids: Tensor, cache: LMCache) -> Tensor:
    """ids (B, t) through the model on ``cache`` -> logits at the last position (B, V)."""
    return model.logits(model.features(ids, cache)[:, -1])
