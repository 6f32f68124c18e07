"""What both servers' workers share: one thread owning the model, and the refusal of a full
queue (``Overloaded``: the client should retry later)."""

from __future__ import annotations

import threading


class Overloaded(RuntimeError):
    """The queue holds ``max_queue`` sentences already: the client should retry later."""


class WorkerThread:
    """One thread owning the model, woken through ``_ready``; ``start()``, ``stop()``. The
    subclass's ``_work`` returns once ``_stopping`` is set and its queue is empty."""

    def __init__(self, name: str):
        self._ready = threading.Condition()
        self._stopping = False
        self._thread = threading.Thread(target=self._work, name=name)

    def _work(self) -> None:
        raise NotImplementedError

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Finish every queued job, then end the worker thread."""
        with self._ready:
            self._stopping = True
            self._ready.notify()
        self._thread.join()
