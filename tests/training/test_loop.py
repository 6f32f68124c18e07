"""training.loop's shared rules: the early-stop rule and the processes' micro-batch numbers
(the loop itself runs in every family's fit tests)."""

import itertools

from decoderkit.training import loop
from decoderkit.training.distributed import Context


def test_patience_spent_stops_once_patience_validations_did_not_help():
    assert [loop.patience_spent(2, bad) for bad in range(4)] == [
        None, None, "no improvement", "no improvement"]
    assert loop.patience_spent(0, 1000) is None  # 0: never


def test_rank_batches_are_disjoint_across_processes_and_resume_where_they_stopped():
    def numbers(rank, world, start, n):
        ctx = Context(rank=rank, world=world, device=None)
        return list(itertools.islice(loop.rank_batches(start, ctx, lambda i: i), n))

    streams = [numbers(r, 3, 0, 5) for r in range(3)]
    assert sorted(sum(streams, [])) == list(range(15))  # every number once over the ranks
    assert numbers(1, 3, 2, 3) == streams[1][2:]  # from micro-batch 2 on: the same numbers
