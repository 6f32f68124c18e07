"""Text generation with a decoder-only LM: the prompt in one forward (prefill), then one token
a step on the key/value cache; greedy or sampled with ``decoding``'s filters and generators;
ended by an end-of-text id or a stop sequence, or after ``max_new_tokens``.

Prompts of different lengths run as rows of ``lm_rows.Rows`` (continuous batching's core, the
one the server steps): each row on its own cache and generator, so a row gives the tokens it
would give alone (bit for bit with a ``rowwise`` model, see ``lm_rows``).

The context (``config.max_len`` = C positions): the model never sees more than the last C
tokens, as nanoGPT's ``generate`` (which crops ``idx[:, -block_size:]``). A prompt longer than
C is cropped to its last C tokens; once prompt + generated tokens reach C, each further token
is computed from the last C tokens by a fresh prefill of that window (a sliding window whose
cache is recomputed every step: exact, the same tokens as recomputing without any cache, at
the cost of a C-token forward per step).

Legend: B batch, C context length, V vocabulary size.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from decoderkit.base.checks import SEED_MAX
from decoderkit.base.errors import UsageError
from decoderkit.generation.limits import PerRow, check_int, check_sampling, logits_dtype
from decoderkit.generation.lm.choose import usable_vocab
from decoderkit.generation.lm.row import Row, Settings, check_prompt
from decoderkit.generation.lm.rows import Rows
from decoderkit.generation.lm.stops import Decode
from decoderkit.nn.lm.model import DecoderOnlyLM

OnStep = Callable[[int, list[int | None]], object]  # (step, the B tokens; None: row ended)


def check_prompts(model: DecoderOnlyLM, prompts: list[list[int]], vocab: int | None = None
                  ) -> list[list[int]]:
    """The prompts as lists of ints, unless one is empty or holds an id outside the vocabulary
    (the first ``vocab`` ids, else the model's rows; a UsageError naming the prompt, the
    position and the id)."""
    if not isinstance(model, DecoderOnlyLM):
        raise TypeError(f"model must be a DecoderOnlyLM, got {type(model).__name__}")
    if not isinstance(prompts, (list, tuple)) or not prompts:
        raise UsageError("prompts must be a non-empty list of token-id lists")
    V = usable_vocab(model.config.vocab_size, vocab)
    return [check_prompt(prompt, V, f"prompt {i}") for i, prompt in enumerate(prompts)]


def generate(model: DecoderOnlyLM, prompts: list[list[int]], *, max_new_tokens: int,
             temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0, greedy: bool = False,
             seed: PerRow | None = None, on_step: OnStep | None = None,
             eos_id: int | Sequence[int] | None = None, stop: Sequence[str] = (),
             decode: Decode | None = None, vocab: int | None = None) -> list[list[int]]:
    """Up to ``max_new_tokens`` new tokens after each prompt; returns them per prompt.

    greedy: y_t = argmax_v logits; else a draw from softmax(logits / temperature) filtered by
    top-k then top-p (``decoding.draw``). ``seed``: an int (row b draws with its own generator
    seeded seed + b), one per prompt, or None (fresh). A row ends after an ``eos_id`` (GPT-2's
    ``<|endoftext|>``, a trained model's end of text; returned as its last token) or once its
    text (``decode(ids)``) holds a ``stop`` sequence (its tokens are returned up to the last
    one wholly before it). ``on_step(step, tokens)`` gets the B tokens of each step as soon as
    they are chosen (None for a row that has ended). ``vocab``: the tokenizer's size where the
    model has more rows (padding; ``lm_choose.usable_vocab``): no id past it is chosen. Beyond
    the context: the module docstring.
    """
    vocab = None if vocab is None else check_int("vocab", vocab, 1)
    prompts = check_prompts(model, prompts, vocab)
    check_int("max_new_tokens", max_new_tokens, 1)
    check_sampling(temperature, top_k, top_p, logits_dtype(model))
    if not isinstance(greedy, bool):
        raise UsageError(f"greedy must be a bool, got {greedy!r}")
    if on_step is not None and not callable(on_step):
        raise TypeError(f"on_step must be callable as on_step(step, tokens), got {on_step!r}")
    eos = frozenset(_eos_ids(model, eos_id))
    seeds = row_seeds(seed, len(prompts))
    rows = Rows(model)
    runs = [Row(p, Settings(max_new_tokens, greedy=greedy, temperature=temperature,
                            top_k=top_k, top_p=top_p, seed=s, eos_ids=eos, stop=tuple(stop),
                            usable_vocab=usable_vocab(model.config.vocab_size, vocab)),
                decode) for p, s in zip(prompts, seeds, strict=True)]
    for row in runs:
        rows.join(row)
    steps = 0

    def show(events) -> None:  # each step's tokens as soon as they are chosen
        chosen = {id(row): token.id for row, token in events}
        on_step(steps, [chosen.get(id(row)) for row in runs])

    while rows.running:
        rows.step(None if on_step is None else show)
        steps += 1
    return [row.generated for row in runs]


def row_seeds(seed: PerRow | None, batch: int) -> list[int | None]:
    """One seed per row: None (fresh), an int s (row b: s + b, wrapping), or one per row."""
    if isinstance(seed, (list, tuple)):
        if len(seed) != batch:
            raise UsageError(f"seed must be an int, None or one int per source row ({batch}), "
                             f"got {len(seed)} values")
        return list(seed)
    if seed is None:
        return [None] * batch
    check_int("seed", seed, 0, SEED_MAX)
    return [(seed + b) % (SEED_MAX + 1) for b in range(batch)]


def _eos_ids(model: DecoderOnlyLM, eos_id: int | Sequence[int] | None) -> list[int]:
    """The end-of-text ids as a list, each in the vocabulary."""
    ids = [] if eos_id is None else [eos_id] if isinstance(eos_id, int) else list(eos_id)
    for i in ids:
        check_int("eos_id", i, 0, model.config.vocab_size - 1)
    return ids
