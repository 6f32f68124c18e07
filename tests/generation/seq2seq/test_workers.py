"""generation.seq2seq.workers: each worker's share of the threads, the refusal with a compiled step,
and torch's thread count inside and after the block."""

from __future__ import annotations

import pytest
import torch

from decoderkit.base.errors import UsageError
from decoderkit.generation.seq2seq.workers import check_workers, shared_threads, thread_share


def test_each_worker_gets_its_share_of_the_threads_at_least_one():
    assert [thread_share(t, w) for t, w in [(4, 2), (5, 2), (2, 2), (1, 2), (0, 2)]] == \
        [2, 2, 1, 1, 1]
    assert [thread_share(t, 1) for t in (0, 1, 3)] == [0, 1, 3]  # one worker: as given


def test_workers_with_a_compiled_step_are_refused_in_the_callers_words():
    check_workers(1, True)
    check_workers(4, False)
    with pytest.raises(UsageError, match="^--workers 2 decodes .* a --compile step .* "
                                         "give --workers 1 with --compile$"):
        check_workers(2, True, ("--workers", "--compile"))


def test_the_threads_are_shared_inside_the_block_and_restored_after():
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        with shared_threads(2):
            assert torch.get_num_threads() == 1
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
