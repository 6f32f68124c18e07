"""The bounds of an encoder-decoder decoding call: how many tokens it may generate and which
tokens it never generates (the argument checks both families share: ``generation.limits``).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from decoderkit.base.checks import LENGTH_PENALTY, Range
from decoderkit.base.errors import UsageError
from decoderkit.generation.limits import PerRow, check_in_dtype, check_int
from decoderkit.nn.seq2seq.model import ModelConfig

LENGTH_FACTOR, LENGTH_SLACK = 2, 16  # default bound: 2 * source tokens + 16


def default_max_len(source_len: int, model_max_len: int) -> int:
    """The most tokens to generate for a source of ``source_len`` tokens when the caller sets
    no bound: 2 * source_len + 16, at most the model's max_len.

    L generated tokens occupy L decoder positions (BOS and the first L - 1 tokens; the last is
    never fed back), so L = max_len fits the positional table; the cache adds its own spare
    position (``DecoderCache``). The one rule of translate, evaluation, training's validation
    and the attention figures.
    """
    return min(model_max_len, LENGTH_FACTOR * source_len + LENGTH_SLACK)



def banned_ids(config: ModelConfig) -> list[int]:
    """Token ids never generated: pad and BOS (as fairseq and Marian), unless one is EOS."""
    return sorted({config.pad_id, config.bos_id} - {config.eos_id})



def restrict(logp: Tensor, t: int, min_len: int, config: ModelConfig,
             last: Tensor | None = None, banned: tuple[int, ...] = ()) -> Tensor:
    """logp (N, V) with the banned ids (``banned_ids`` and the call's ``banned``: Marian's
    translator bans ``<unk>``), and EOS while fewer than ``min_len`` tokens would have been
    generated (``t`` tokens so far), set to -inf; a new tensor, the others' values kept.
    ``last`` (N,) bool, with ``forced_eos``: the rows at their last allowed token, which get
    EOS with log-prob 0 and nothing else (Hugging Face's ``forced_eos_token_id``).

    Not renormalised: a chosen token's value is still the model's own log-probability (but a
    forced EOS's)."""
    logp = logp.clone()
    logp[:, banned_ids(config) + list(banned)] = float("-inf")
    if t + 1 < min_len:
        logp[:, config.eos_id] = float("-inf")
    if last is not None and bool(last.any()):
        logp[last] = float("-inf")
        logp[last, config.eos_id] = 0.0
    return logp



def last_step(forced_eos: bool, limit: Tensor, t: int, per_source: int = 1) -> Tensor | None:
    """With ``forced_eos``: (N,) whether step ``t`` is each row's last allowed one (``limit``
    (B,) per source, ``per_source`` rows each: beam search's hypotheses); else None."""
    if not forced_eos:
        return None
    return (limit - 1 == t).repeat_interleave(per_source)



def check_length_penalty(value, max_len: int, dtype: torch.dtype) -> float:
    """``value`` as a float if beam search can rank hypotheses of up to ``max_len`` tokens by
    log p / length ** value in ``dtype``: in ``base.checks.LENGTH_PENALTY`` and at most
    log(largest finite) / log(max_len), beyond which length ** value is inf and every score 0
    (a tie)."""
    LENGTH_PENALTY.check("length_penalty", value)
    high = math.log(torch.finfo(dtype).max) / math.log(max(max_len, 2))
    return check_in_dtype("length_penalty", value, Range(False, 0.0, high), dtype,
                           f"beyond, {max_len} ** length_penalty is inf in {{dt}}")



def row_limits(max_len: PerRow, batch: int, config: ModelConfig) -> Tensor:
    """Each source row's token bound as a (B,) long tensor: ``max_len`` one int for every row,
    or a list/tuple of one int per row (each decoded as it would be alone with its bound)."""
    if isinstance(max_len, (list, tuple)):
        if len(max_len) != batch:
            raise UsageError(f"max_len must be an int or one int per source row ({batch}), "
                             f"got {len(max_len)} values")
        limits = list(max_len)
    else:
        limits = [max_len] * batch
    for value in limits:
        check_int("max_len", value, 1, config.max_len)
    return torch.tensor(limits, dtype=torch.long)
