"""Accepted ranges of numeric settings, checked the same way at every boundary.

A ``Range`` is the one statement of what a setting accepts: config dataclasses check their
fields with it (``UsageError`` naming the field), and the command line's argparse types are
built from it (``decoderkit.cli.args``), so a flag and its config field cannot disagree.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from decoderkit.base.errors import UsageError

SEED_MAX = 2**32 - 1  # seeds are ints in [0, SEED_MAX] (every RNG we feed accepts them)


def written(number: float, toward: int = 0) -> str:
    """A bound as a person writes it: an int as it is, a float as Python prints it unless
    that takes more than 8 characters, then to 3 significant digits (float32's smallest
    normal: 1.18e-38, not 1.1754943508222875e-38, nor pydantic's 39-digit decimal), rounded
    up (``toward`` 1: a lower bound) or down (-1: an upper one), so that every number past
    the bound written is past the bound itself."""
    if isinstance(number, int) or len(repr(number)) <= 8:
        return repr(number)
    step = 10.0 ** (math.floor(math.log10(abs(number))) - 2)
    rounded = {1: math.ceil, -1: math.floor}.get(toward, round)(number / step) * step
    return f"{rounded:.3g}"


@dataclass(frozen=True)
class Range:
    """Integers (``integral``) or finite numbers in [low, high]; an open end excludes it."""

    integral: bool  # True: ints only (counts, sizes, seeds); False: finite floats or ints
    low: float | None = None  # smallest accepted value (None: no lower bound)
    high: float | None = None  # largest accepted value (None: no upper bound)
    low_open: bool = False  # exclude ``low`` itself
    high_open: bool = False  # exclude ``high`` itself

    @property
    def span(self) -> str:
        """'an integer >= 1', 'a finite number in (0, 1]', ... for messages and help texts."""
        kind = "an integer" if self.integral else "a finite number"
        lo = None if self.low is None else written(self.low, 1)
        hi = None if self.high is None else written(self.high, -1)
        if lo is not None and hi is not None:
            return (f"{kind} in {'(' if self.low_open else '['}{lo}, {hi}"
                    f"{')' if self.high_open else ']'}")
        if lo is not None:
            return f"{kind} {'>' if self.low_open else '>='} {lo}"
        if hi is not None:
            return f"{kind} {'<' if self.high_open else '<='} {hi}"
        return kind

    def accepts(self, value: object) -> bool:
        """True if ``value`` is of the right kind (bools never are), finite and in range."""
        kinds = int if self.integral else (int, float)
        if isinstance(value, bool) or not isinstance(value, kinds):
            return False
        if not math.isfinite(value):
            return False
        lo, hi = self.low, self.high
        return (lo is None or value > lo or (value == lo and not self.low_open)) \
            and (hi is None or value < hi or (value == hi and not self.high_open))

    def check(self, name: str, value: object) -> None:
        """Raise ``UsageError`` naming ``name``, the range and ``value`` unless accepted."""
        if not self.accepts(value):
            raise UsageError(f"{name} must be {self.span}, got {value!r}")


def count(low: int = 1, high: int | None = None) -> Range:
    """An integer range, [1, inf) by default: sizes, steps, counts."""
    return Range(True, low, high)


MAX_COUNT = 1 << 20  # 1,048,576: the most of one kind of thing a size setting may ask for


def size(low: int = 1) -> Range:
    """The one bound of every size setting (sentences or windows per batch, micro-batches per
    step, pairs generated, blocks, texts, queue places, ...): an integer in [low, MAX_COUNT],
    so that no typo (``--batch-size 100000000``) asks for terabytes before any check."""
    return count(low, MAX_COUNT)


BODY_BYTES = count(1, 1 << 30)  # a server's request-body cap (--max-body-bytes): a body is
# read whole into memory before it is parsed, so at most 1 GiB (the servers' default: 64 KiB)

PREFIX_CACHE_MB = count(1, 1 << 20)  # MiB a prefix store holds (--prefix-cache-mb; off:
# --no-prefix-reuse): at most 1 TiB
DEFAULT_PREFIX_CACHE_MB = 1024  # the server's and lm chat's prefix store unless told

MAX_STEP_TOKENS = 1 << 24  # positions one optimiser step may hold: 16,777,216 (GPT-2's
# recipe: 491,520), bounding batch_size x accum x sequence length together


def check_step_tokens(batch_size: int, accum: int, length: int, names: str) -> None:
    """Refuse a training step of more than ``MAX_STEP_TOKENS`` positions (``batch_size``
    sequences of up to ``length`` tokens in each of ``accum`` micro-batches, all held at
    once); ``names`` names the three settings, e.g. '--batch-size x --accum x --block-size'."""
    tokens = batch_size * accum * length
    if tokens > MAX_STEP_TOKENS:
        raise UsageError(f"{names} = {batch_size} x {accum} x {length} = {tokens:,} positions "
                         f"a step, more than the {MAX_STEP_TOKENS:,} a step may hold: lower one")


SEED = count(0, SEED_MAX)
# Generation and serving settings, the same at every boundary: the CLI's flag, the HTTP
# schema's field and the library's argument (each caller also bounds them by what a model's
# dtype holds: ``generation.limits``).
TEMPERATURE = Range(False, 0, 100, low_open=True)  # (0, 100]: softmax(logp / t); beyond
# 100 sampling is uniform over the allowed tokens in effect
LENGTH_PENALTY = Range(False, 0, 10)  # [0, 10]: beam ranking log p / length ** this
WAIT_MS = Range(False, 0, 60_000)  # [0, 60 s]: how long a server's job waits for company
BATCH = count(1, 4096)  # rows a server decodes or steps together
QUEUE = size()  # rows (sentences, prompt x n) a server holds waiting
WORK = size()  # tokens one request may make a server's model compute or hold
FRACTION = Range(False, 0.0, 1.0, high_open=True)  # [0, 1): dropout, label smoothing
POSITIVE = Range(False, 0.0, low_open=True)  # (0, inf): durations, norms
RATE = Range(False, 0.0, 10.0, low_open=True)  # (0, 10]: learning rates and their factors
# (far above any that trains; 1e308 overflows the optimiser's update)
WEIGHT = Range(False, 0.0, 10.0)  # [0, 10]: a final rate, weight decay, a loss's weight


def check_fields(config: object, ranges: dict[str, Range], optional: tuple[str, ...] = ()
                 ) -> None:
    """Check each field of a dataclass ``config`` named in ``ranges``; ``optional`` ones may
    also be None."""
    for name, accepted in ranges.items():
        value = getattr(config, name)
        if value is None and name in optional:
            continue
        accepted.check(name, value)


def check_choice(name: str, value: object, choices) -> None:
    """Raise ``UsageError`` naming ``name``, the ``choices`` and ``value`` unless it is one."""
    if not any(value == choice and type(value) is type(choice) for choice in choices):
        raise UsageError(f"{name} must be one of {tuple(choices)}, got {value!r}")


def check_bools(config: object, names: tuple[str, ...]) -> None:
    """Raise ``UsageError`` naming the first field in ``names`` that is not a bool."""
    for name in names:
        if not isinstance(getattr(config, name), bool):
            raise UsageError(f"{name} must be a bool, got {getattr(config, name)!r}")


def checked_ids(ids, vocab_size: int) -> list[int]:
    """Token ``ids`` (any iterable of ints) as a list, each in [0, vocab_size); else a
    UsageError naming the first one outside."""
    ids = [int(i) for i in ids]
    bad = [i for i in ids if not 0 <= i < vocab_size]
    if bad:
        raise UsageError(f"token id {bad[0]} is outside the vocabulary [0, {vocab_size})")
    return ids


# What a model config's sizes accept: generous for real models (GPT-2 xl: 48 layers, d_model
# 1600, 25 heads, vocabulary 50257, 1024 positions; Marian opus-mt: vocabulary 58101, 512
# positions; nn.Transformer's defaults), yet bounded, so that no edited config asks for a
# terabyte; ``check_parameter_budget`` bounds their product.
VOCAB = count(1, 1 << 20)  # tokens in a vocabulary
MODEL_SIZES = {"src_vocab": VOCAB, "tgt_vocab": VOCAB, "vocab_size": VOCAB,
               "n_layers": count(1, 512), "d_model": count(1, 1 << 16),
               "n_heads": count(1, 1024), "d_ff": count(1, 1 << 18),
               "max_len": count(1, 1 << 16)}  # max_len: positions (the --max-len flag's bound)
MAX_PARAMETERS = 1 << 34  # about 17 billion: 64 GiB of float32 weights, far above any preset


def check_parameter_budget(what: str, parameters: int) -> None:
    """Refuse a config whose model would hold more than ``MAX_PARAMETERS`` numbers (``what``
    names its sizes), before anything is allocated."""
    if parameters > MAX_PARAMETERS:
        raise UsageError(f"{what} gives a model of about {parameters:.3g} parameters, more "
                         f"than the {MAX_PARAMETERS:.3g} decoderkit builds (a damaged or "
                         "mistyped config?)")


def check_autotune(compile: bool, autotune: bool) -> None:
    """``autotune`` tunes a compiled step: refused without ``compile``, naming the flags."""
    if autotune and not compile:
        raise UsageError("--autotune needs --compile")
