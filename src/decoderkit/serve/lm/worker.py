"""Continuous batching: one worker thread steps every running request's rows together.

A ``Job`` is one request's rows (prompts x n, each a ``generation.lm.row.Row``). Between two
steps the worker takes the jobs waiting, in arrival order, while the running rows stay within
``max_running``, and joins their rows (``Rows.join``; the next step prefills them together)
to step with the others; a row that finishes leaves at once, and a job whose client has gone
(``Job.cancel``) has its rows dropped before the next step. Each event is handed to the
job's asyncio queue on the server's event loop (``call_soon_threadsafe``): the model never
runs on the loop, so the server answers while the worker steps.

A step that raises ends every job in it with that error (their rows are dropped) and the
worker steps on with the jobs after them; a worker thread that dies all the same (a failure
outside a step) answers every job queued or running with ``WorkerDied`` and refuses the later
ones (``serve.worker``).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from dataclasses import dataclass, field

from decoderkit.base.errors import UsageError
from decoderkit.generation.lm.row import FINISH_LENGTH, Row
from decoderkit.serve.lm.metrics import Metrics
from decoderkit.serve.worker import Overloaded, StepFailed, WorkerDied, WorkerThread

DONE = None  # the event after a job's last row finished


@dataclass(eq=False)
class Job:
    """One request's rows; its events arrive on ``queue`` as (row index, Token), (row index,
    None) once the row has joined (its prompt scored if asked), (-1, exception) for an error,
    then ``DONE``."""

    rows: list[Row]
    loop: asyncio.AbstractEventLoop
    queue: asyncio.Queue = field(default_factory=asyncio.Queue)
    cancelled: bool = False
    left: int = 0  # rows not finished yet
    born: float = field(default_factory=time.monotonic)  # its arrival (the metrics' start)
    last: float | None = None  # when its latest step's tokens were emitted

    def cancel(self) -> None:
        """The client is gone: its rows leave before the next step."""
        self.cancelled = True

    def emit(self, event) -> None:
        self.loop.call_soon_threadsafe(self.queue.put_nowait, event)


class Worker(WorkerThread):
    """The job queue and the thread stepping the rows; ``start()``, ``submit()``...,
    ``stop()``."""

    def __init__(self, rows, max_running: int, max_queue: int):
        super().__init__("decoderkit-lm-worker")
        self.rows = rows  # a Rows, or another engine's stepper with its join/step/drop
        self.max_running, self.max_queue = max_running, max_queue
        self.metrics = Metrics()
        self.counts = self.metrics.counts
        self._waiting: deque[Job] = deque()
        self._running: dict[int, tuple[Job, int]] = {}  # id(row) -> (its job, its index)
        self._jobs: list[Job] = []  # running jobs
        self._warm = threading.Event()  # set once the thread has warmed up

    def submit(self, job: Job) -> None:
        """Queue a job; ``Overloaded`` when its rows would pass ``max_queue`` waiting rows or
        one request asks for more rows than ever run together."""
        if len(job.rows) > self.max_running:
            raise UsageError(f"the request has {len(job.rows)} rows (prompts x n), more than "
                             f"the {self.max_running} this server runs together (--max-batch)")
        with self._ready:
            self.check_open()
            if self.counts.rows_waiting + len(job.rows) > self.max_queue:
                raise Overloaded(f"{self.counts.rows_waiting} rows are waiting already "
                                 f"(max_queue {self.max_queue}, --max-queue)")
            job.left = len(job.rows)
            self._waiting.append(job)
            self.counts.waiting += 1
            self.counts.rows_waiting += len(job.rows)
            self._ready.notify()

    def start(self) -> None:
        """Start the thread; returns once it has warmed up (``Rows.warm_up``, in that thread),
        so a server answers only once its first request is as fast as the others."""
        super().start()
        self._warm.wait()

    def _work(self) -> None:
        try:
            warm_up = getattr(self.rows, "warm_up", None)  # CTranslate2's rows have none
            if warm_up is not None:
                warm_up()
        finally:
            self._warm.set()
        while True:
            with self._ready:
                while not self._waiting and not self.rows.running:
                    if self._stopping:
                        return
                    self._ready.wait()
                joining = self._admit()
            for job in joining:
                self._join(job)
            self._drop_cancelled()
            self.counts.rows_running = len(self.rows.running)
            if self.rows.running:
                try:
                    self._step()
                except Exception as err:  # noqa: BLE001 - handed to the requests in the step
                    self._fail_running(err)

    def _abandon(self, err: WorkerDied) -> None:
        """The thread is dead: every job waiting or running gets ``err`` (lock held)."""
        while self._waiting:
            job = self._waiting.popleft()
            self.counts.waiting -= 1
            self.counts.rows_waiting -= len(job.rows)
            self._end(job, err)
        for job in list(self._jobs):
            self._end(job, err)

    def _fail_running(self, err: Exception) -> None:
        """A step raised: every job in it ends with ``err`` (as ``StepFailed``: the server's
        fault), its rows dropped."""
        failed = StepFailed(err)
        for job in list(self._jobs):
            self._drop(job)
            self._end(job, failed)
        self.counts.rows_running = len(self.rows.running)

    def _admit(self) -> list[Job]:
        """The waiting jobs that fit beside the running rows, oldest first (lock held)."""
        joining, rows = [], len(self.rows.running)
        while self._waiting and rows + len(self._waiting[0].rows) <= self.max_running:
            job = self._waiting.popleft()
            joining.append(job)
            rows += len(job.rows)
            self.counts.waiting -= 1
            self.counts.rows_waiting -= len(job.rows)
        return joining

    def _join(self, job: Job) -> None:
        """Prefill the job's rows; an error (a bug, or a setting the model refuses) ends the
        job alone."""
        if job.cancelled:
            self.counts.dropped += 1
            return self._end(job)
        self._jobs.append(job)
        self.counts.running += 1
        try:
            for i, row in enumerate(job.rows):
                self.rows.join(row)
                job.emit((i, None))  # joined (and scored if asked): its prompt may be echoed
                if row.finish_reason is not None:
                    self._finished(job)
                else:
                    self._running[id(row)] = (job, i)
        except Exception as err:  # noqa: BLE001 - handed to the request that caused it
            self._drop(job)
            self._end(job, err)

    def _drop(self, job: Job) -> None:
        """The job's rows leave."""
        for row in job.rows:
            self.rows.drop(row)
            self._running.pop(id(row), None)

    def _drop_cancelled(self) -> None:
        for job in [j for j in self._jobs if j.cancelled]:
            self._drop(job)
            self.counts.dropped += 1
            self._end(job)

    def _step(self) -> None:
        self.rows.step(self._emit)
        self.counts.steps += 1
        self.counts.rows_running = len(self.rows.running)
        store = getattr(self.rows, "prefixes", None)  # CTranslate2's rows keep none
        if store is not None:
            c = self.counts
            c.prefix_hits, c.prefix_reused, c.prefix_bytes = store.hits, store.reused, store.bytes

    def _emit(self, events) -> None:
        """A step's tokens to their jobs, as soon as they are chosen."""
        self.counts.generated += len(events)
        now = time.monotonic()
        for job in dict.fromkeys(self._running[id(row)][0] for row, _ in events):
            self._timed(job, now)  # once a step per job, however many rows it has
        for row, token in events:
            job, i = self._running[id(row)]
            job.emit((i, token))
            if token.finish_reason is not None:
                del self._running[id(row)]
                self._finished(job)

    def _timed(self, job: Job, now: float) -> None:
        """The job's tokens of this step: its time to the first token, or since its last."""
        if job.last is None:
            self.metrics.first_token.observe(now - job.born)
        else:
            self.metrics.between_tokens.observe(now - job.last)
        job.last = now

    def _finished(self, job: Job) -> None:
        job.left -= 1
        if job.left == 0:
            self._end(job)

    def _end(self, job: Job, err: Exception | None = None) -> None:
        if err is not None:
            outcome = "error"
        elif job.cancelled:
            outcome = "cancelled"
        else:
            length = any(row.finish_reason == FINISH_LENGTH for row in job.rows)
            outcome = "length" if length else "stop"
        self.metrics.requests.labels(outcome).inc()
        if outcome != "cancelled":
            self.metrics.latency.observe(time.monotonic() - job.born)
        if job in self._jobs:
            self._jobs.remove(job)
            self.counts.running -= 1
        if err is not None:
            job.emit((-1, err))
        job.emit(DONE)
