"""Batches decoded at once, each on its own thread: the rules they share.

``translate_lines(workers=N)`` and the CTranslate2 engine's ``workers`` (its replicas) run N
batches at once; each gets its share of the CPU threads (``thread_share``), and a compiled step
cannot serve them (``check_workers``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

from decoderkit.base.errors import UsageError


def check_workers(workers: int, compile: bool, names: tuple[str, str] = ("workers", "compile")
                  ) -> None:
    """Batches decoded at once (``workers`` > 1) run on threads, which a compiled step does
    not serve; ``names``: how the caller calls the two (the CLI: its flags)."""
    if workers > 1 and compile:
        w, c = names
        raise UsageError(f"{w} {workers} decodes batches on threads at once, which a {c} step "
                         f"does not serve: give {w} 1 with {c}")


def thread_share(threads: int, workers: int) -> int:
    """Each of ``workers`` batches' intra-op threads out of ``threads`` (at least one), so
    they do not oversubscribe the cores; ``threads`` itself for one worker."""
    return threads if workers == 1 else max(1, threads // workers)


@contextmanager
def shared_threads(workers: int) -> Iterator[None]:
    """torch's intra-op threads shared among ``workers`` threads decoding at once
    (``thread_share``) inside the block; restored after. torch has one setting for the whole
    process, so other torch work running meanwhile gets the share too."""
    before = torch.get_num_threads()
    torch.set_num_threads(thread_share(before, workers))
    try:
        yield
    finally:
        torch.set_num_threads(before)
