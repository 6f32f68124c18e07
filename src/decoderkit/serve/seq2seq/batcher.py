"""Dynamic batching: requests that arrive together with the same options decode as one batch.

One worker thread owns the model (decoding never runs on the event loop, so the server keeps
answering while a batch decodes). A job is one request's texts and its ``DecodeOptions``; the
worker takes the oldest job with the jobs of equal options queued beside it (up to
``max_batch`` sentences) and decodes them with one ``translate`` call. It waits for the
company it expects, at most until the oldest job is ``max_wait_ms`` old: as many jobs as the
previous batch held, one more if the oldest arrived in company (the worker busy or others
queued). So a lone client is served at once, as with batching off, and N clients sending
their next requests as soon as they have their answers are decoded N at a time, the batch
starting when the N-th arrives.
Each text's result is what it gives alone (``translate_lines`` decodes every line as alone).
If a merged batch raises, each of its jobs is run again alone, so only the job that caused it
gets the error. A job whose client went away before its batch started is dropped. A worker
thread that dies all the same answers every job queued or decoding with ``WorkerDied`` and
refuses the later ones (``serve.worker``).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field

from decoderkit.generation.seq2seq.translate import DecodeOptions, Translation
from decoderkit.serve.worker import Overloaded, WorkerDied, WorkerThread

Translate = Callable[[list[str], DecodeOptions], list[Translation]]


@dataclass
class Job:
    """One request's texts; ``future`` gets its list of ``Translation`` (or the exception)."""

    lines: list[str]
    options: DecodeOptions
    born: float = field(default_factory=time.monotonic)
    future: Future = field(default_factory=Future)
    crowded: bool = False  # the worker was busy or other jobs were queued when it arrived

    def cancel(self) -> None:
        """The client is gone: drop the job unless its batch already started."""
        self.future.cancel()


@dataclass
class Stats:
    """Counters for /health and the tests: what the worker has done so far."""

    batches: int = 0  # translate calls
    sentences: int = 0  # texts decoded
    largest_batch: int = 0  # most texts in one call
    dropped: int = 0  # jobs whose client left before their batch started
    queued: int = 0  # texts waiting now
    busy: int = 0  # texts being decoded now


class Batcher(WorkerThread):
    """The job queue and its worker thread; ``start()``, ``submit()``..., ``stop()``."""

    def __init__(self, translate: Translate, max_batch: int, max_wait_ms: float, max_queue: int):
        super().__init__("decoderkit-batcher")
        self.translate, self.max_batch, self.max_queue = translate, max_batch, max_queue
        self.max_wait = max_wait_ms / 1000.0
        self.stats = Stats()
        self._pending: deque[Job] = deque()
        self._working = False  # a batch is taken and being decoded
        self._last_jobs = 0  # jobs in the batch taken last
        self._batch: list[Job] = []  # the jobs being decoded

    def submit(self, lines: list[str], options: DecodeOptions) -> Job:
        """Queue a job; raises ``Overloaded`` when it would pass ``max_queue`` sentences."""
        job = Job(list(lines), options)
        with self._ready:
            self.check_open()
            if self.stats.queued + len(job.lines) > self.max_queue:
                raise Overloaded(f"{self.stats.queued} sentences are queued already "
                                 f"(max_queue {self.max_queue})")
            job.crowded = self._working or bool(self._pending)
            self._pending.append(job)
            self.stats.queued += len(job.lines)
            self._ready.notify()
        return job

    def _work(self) -> None:
        while True:
            batch = self._next_batch()
            if batch is None:
                return
            self._run(batch)

    def _next_batch(self) -> list[Job] | None:
        """The oldest job plus the compatible jobs queued or arriving within its wait, which
        ends when the expected company is there (None: stop)."""
        with self._ready:
            self._working = False
            while not self._pending:
                if self._stopping:
                    return None
                self._ready.wait()
            batch = [self._pending.popleft()]
            size = len(batch[0].lines)
            expected = self._last_jobs + batch[0].crowded
            deadline = batch[0].born + self.max_wait
            while size < self.max_batch:
                for job in [j for j in self._pending if j.options == batch[0].options]:
                    if size + len(job.lines) > self.max_batch:
                        continue  # too big to join: it starts a later batch
                    self._pending.remove(job)
                    batch.append(job)
                    size += len(job.lines)
                left = deadline - time.monotonic()
                if left <= 0 or self._stopping or len(batch) >= expected:
                    break
                self._ready.wait(left)
            self.stats.queued -= size
            self._working, self._last_jobs = True, len(batch)
            return batch

    def _run(self, batch: list[Job]) -> None:
        """Decode the jobs still wanted (their clients are there) as one call."""
        live = [job for job in batch if job.future.set_running_or_notify_cancel()]
        self.stats.dropped += len(batch) - len(live)
        if live:
            self.stats.busy, self._batch = sum(len(job.lines) for job in live), live
            self._decode(live)
            self.stats.busy, self._batch = 0, []

    def _abandon(self, err: WorkerDied) -> None:
        """The thread is dead: every job queued or decoding gets ``err`` (lock held)."""
        for job in [*self._pending, *self._batch]:
            if not job.future.done():
                job.future.set_exception(err)
        self._pending.clear()
        self.stats.queued = self.stats.busy = 0

    def _decode(self, jobs: list[Job]) -> None:
        """One ``translate`` call for ``jobs``; set each job's future."""
        lines = [line for job in jobs for line in job.lines]
        try:
            results = self.translate(lines, jobs[0].options)
        except Exception as err:  # noqa: BLE001 - handed to the request that caused it
            if len(jobs) == 1:
                self._idle()
                jobs[0].future.set_exception(err)
            else:  # one at a time: only the guilty job fails
                for job in jobs:
                    self._decode([job])
            return
        self._idle()
        self.stats.batches += 1
        self.stats.sentences += len(lines)
        self.stats.largest_batch = max(self.stats.largest_batch, len(lines))
        start = 0
        for job in jobs:
            job.future.set_result(results[start:start + len(job.lines)])
            start += len(job.lines)

    def _idle(self) -> None:
        """The decoding is done: a job arriving from now on (say, the same client's next
        request, sent as soon as it has its answer) finds the worker free."""
        with self._ready:
            self._working = False
