"""What both servers' workers share: one thread owning the model, the refusal of a full
queue (``Overloaded``: the client should retry later) and of a worker that has died
(``WorkerDied``: /health fails and every request is answered at once, none hangs)."""

from __future__ import annotations

import logging
import threading

LOG = logging.getLogger("decoderkit.serve")


class Overloaded(RuntimeError):
    """The queue holds ``max_queue`` sentences already: the client should retry later."""


class WorkerDied(RuntimeError):
    """The worker thread has ended on an error: the server cannot answer any more requests
    (503; restart it). The message names the error."""


class StepFailed(RuntimeError):
    """A batched step of the model raised: the server's fault, whatever the error's class (a
    model whose tokenizer lacks an id it generates raises a UsageError), never the client's."""

    def __init__(self, err: BaseException):
        super().__init__(f"the model failed on this request's step: {type(err).__name__}: "
                         f"{err}")


class WorkerThread:
    """One thread owning the model, woken through ``_ready``; ``start()``, ``stop()``. The
    subclass's ``_work`` returns once ``_stopping`` is set and its queue is empty; if it
    raises instead, the worker is dead (``failure``): ``_abandon`` answers every job queued
    or running with the error, and ``check_open`` refuses the later ones."""

    def __init__(self, name: str):
        self._ready = threading.Condition()
        self._stopping = False
        self.failure: WorkerDied | None = None  # set once the thread has died
        self._thread = threading.Thread(target=self._main, name=name)

    def _work(self) -> None:
        raise NotImplementedError

    def _abandon(self, err: WorkerDied) -> None:
        """Answer every job queued or running with ``err`` (the thread is dead; lock held)."""
        raise NotImplementedError

    def _main(self) -> None:
        try:
            self._work()
        except BaseException as err:  # noqa: BLE001 - the thread ends: said, never silent
            LOG.exception("the %s thread died", self._thread.name)
            with self._ready:
                self.failure = WorkerDied(f"the server's worker died on "
                                          f"{type(err).__name__}: {err} (restart the server)")
                self._abandon(self.failure)

    def check_open(self) -> None:
        """Refuse a new job (call with the lock held): ``WorkerDied`` when the thread has died,
        ``Overloaded`` once the server is stopping."""
        if self.failure is not None:
            raise self.failure
        if self._stopping:
            raise Overloaded("the server is shutting down")

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Finish every queued job, then end the worker thread."""
        with self._ready:
            self._stopping = True
            self._ready.notify()
        self._thread.join()
