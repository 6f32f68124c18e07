"""The dynamic batcher on the real ``translate_lines``: what it merges, what it keeps apart,
and that one bad job or a departed client costs the others nothing."""

from __future__ import annotations

import threading
import time

import pytest

from decoderkit.generation.seq2seq.translate import DecodeOptions, Translation, translate_lines
from decoderkit.serve.seq2seq.batcher import Batcher
from decoderkit.serve.worker import Overloaded
from decoderkit.training.seq2seq.checkpoint import load_checkpoint
from serve.serving import varied_checkpoint

GREEDY, BEAM = DecodeOptions(), DecodeOptions(beam=2)


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return load_checkpoint(varied_checkpoint(tmp_path_factory.mktemp("batcher") / "ckpt"))


class Recorder:
    """``translate_lines`` on the checkpoint, remembering each call's lines; raises for
    a line "boom" (a stand-in for any failure a request could cause)."""

    def __init__(self, ckpt):
        self.ckpt, self.calls = ckpt, []

    def __call__(self, lines, options):
        self.calls.append(list(lines))
        if "boom" in lines:
            raise ValueError("boom")
        return translate_lines(self.ckpt, lines, options)


def run(ckpt, jobs, max_batch=8, max_wait_ms=300.0, cancel=()):
    """Submit (lines, options) jobs before the worker starts, drain, return jobs and calls."""
    rec = Recorder(ckpt)
    b = Batcher(rec, max_batch=max_batch, max_wait_ms=max_wait_ms, max_queue=100)
    submitted = [b.submit(lines, options) for lines, options in jobs]
    for i in cancel:
        submitted[i].cancel()
    b.start()
    b.stop()
    return submitted, rec.calls, b.stats


def alone(ckpt, line, options):
    return translate_lines(ckpt, [line], options)[0]


def test_jobs_with_equal_options_share_one_call_and_give_what_each_gives_alone(ckpt):
    lines = ["1 jan 2001", "22", "dec 31 1999, late", ""]
    jobs, calls, stats = run(ckpt, [([line], GREEDY) for line in lines])
    assert calls == [lines]
    assert (stats.batches, stats.sentences, stats.largest_batch) == (1, 4, 4)
    for job, line in zip(jobs, lines, strict=True):
        (got,) = job.future.result()
        want = alone(ckpt, line, GREEDY)
        assert (got.text, got.tokens, got.stop_reason) == (want.text, want.tokens,
                                                           want.stop_reason)
        assert got.score == pytest.approx(want.score, rel=1e-5, abs=1e-6)


def test_different_options_are_never_merged(ckpt):
    jobs, calls, _ = run(ckpt, [(["a"], GREEDY), (["b"], BEAM), (["c"], GREEDY), (["d"], BEAM)])
    assert calls == [["a", "c"], ["b", "d"]]
    assert jobs[1].future.result()[0].text == alone(ckpt, "b", BEAM).text


def test_max_batch_caps_a_call_and_a_big_job_is_never_split_across_calls(ckpt):
    _, calls, _ = run(ckpt, [(["a"], GREEDY), (["b", "c"], GREEDY), (["d"], GREEDY)],
                      max_batch=2)
    assert calls == [["a", "d"], ["b", "c"]]


def test_no_wait_means_no_waiting_for_company(ckpt):
    _, calls, _ = run(ckpt, [(["a"], GREEDY), (["b"], GREEDY)], max_batch=1, max_wait_ms=0)
    assert calls == [["a"], ["b"]]


def test_a_failing_job_fails_alone(ckpt):
    jobs, calls, _ = run(ckpt, [(["12"], GREEDY), (["boom"], GREEDY), (["3 4"], GREEDY)])
    assert calls == [["12", "boom", "3 4"], ["12"], ["boom"], ["3 4"]]
    with pytest.raises(ValueError, match="boom"):
        jobs[1].future.result()
    assert jobs[0].future.result()[0].text == alone(ckpt, "12", GREEDY).text
    assert jobs[2].future.result()[0].text == alone(ckpt, "3 4", GREEDY).text


def test_a_job_whose_client_left_is_dropped(ckpt):
    jobs, calls, stats = run(ckpt, [(["a"], GREEDY), (["b"], GREEDY)], cancel=[1])
    assert calls == [["a"]] and stats.dropped == 1 and jobs[1].future.cancelled()


def test_stop_finishes_the_queue_then_refuses(ckpt):
    rec = Recorder(ckpt)
    b = Batcher(rec, max_batch=2, max_wait_ms=0, max_queue=3)
    jobs = [b.submit([x], GREEDY) for x in "abc"]
    with pytest.raises(Overloaded, match="max_queue 3"):
        b.submit(["d"], GREEDY)
    b.start()
    b.stop()
    assert [j.future.result()[0].source for j in jobs] == ["a", "b", "c"]
    assert b.stats.queued == 0 and b.stats.busy == 0
    with pytest.raises(Overloaded, match="shutting down"):
        b.submit(["e"], GREEDY)


class Gate:
    """A translate call that records its lines, tells ``called`` and, for lines in ``hold``,
    waits for ``release`` (the worker stays busy as long as the test wants)."""

    def __init__(self, hold=()):
        self.calls, self.hold = [], set(hold)
        self.called, self.release = threading.Event(), threading.Event()

    def __call__(self, lines, options):
        self.calls.append(list(lines))
        self.called.set()
        if self.hold & set(lines):
            assert self.release.wait(SAFETY_S)
        return [Translation(line, [], line, 0.0, "eos") for line in lines]


SAFETY_S = 30  # only stops a broken batcher from hanging the test; half the wait below
LONG_WAIT_MS = 60_000.0


def test_a_lone_request_is_dispatched_at_once_whatever_max_wait():
    gate = Gate()
    b = Batcher(gate, max_batch=8, max_wait_ms=LONG_WAIT_MS, max_queue=100)
    b.start()
    try:
        for line in ("a", "b"):  # one client: each request sent after the previous answer
            gate.called.clear()
            job = b.submit([line], GREEDY)
            assert gate.called.wait(SAFETY_S), "the lone job waited for company"
            assert job.future.result(SAFETY_S)[0].text == line
    finally:
        b.stop()
    assert gate.calls == [["a"], ["b"]] and b.stats.batches == 2


def taken(b: Batcher) -> None:
    """Returns once the worker has taken every queued job (into a batch or its wait)."""
    while b._pending:
        time.sleep(0.001)


def test_requests_share_a_batch_with_the_company_the_last_batch_had():
    gate = Gate(hold={"first"})
    b = Batcher(gate, max_batch=8, max_wait_ms=LONG_WAIT_MS, max_queue=100)
    b.start()
    try:
        first = b.submit(["first"], GREEDY)
        assert gate.called.wait(SAFETY_S)  # decoding "first" alone, at once
        later = [b.submit([x], GREEDY) for x in ("b", "c")]  # they arrive while it is busy
        gate.release.set()
        assert [j.future.result(SAFETY_S)[0].text for j in (first, *later)] == ["first", "b",
                                                                                 "c"]
        d = b.submit(["d"], GREEDY)  # the two clients' next requests, one after the other
        taken(b)  # "d" taken alone: it waits for the second, as the last batch held two
        e = b.submit(["e"], GREEDY)
        assert [j.future.result(SAFETY_S)[0].text for j in (d, e)] == ["d", "e"]
    finally:
        b.stop()
    assert gate.calls == [["first"], ["b", "c"], ["d", "e"]]
