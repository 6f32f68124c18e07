"""A failing step fails only the requests in it; a dead worker makes /health and every request
fail at once (none hangs)."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from decoderkit.base.errors import UsageError
from decoderkit.generation.lm.row import Row, Settings
from decoderkit.generation.lm.rows import Rows
from decoderkit.serve.lm.app import create_lm_app
from decoderkit.serve.lm.engines import from_lm
from decoderkit.serve.lm.limits import LMLimits
from decoderkit.serve.lm.worker import DONE, Job, Worker
from decoderkit.serve.worker import StepFailed
from serve.lm.lm_serving import LiveServer, tiny_lm

BROKEN = "token id 999 is outside the vocabulary"


class Fatal(BaseException):
    """Not an Exception: what no step handler catches (the thread dies)."""


@pytest.fixture
def faulty(monkeypatch):
    """Rows.step raises the error put in the returned list, once, then steps again."""
    errors, step = [], Rows.step

    def failing(self, *args):
        if errors:
            raise errors.pop()
        return step(self, *args)

    monkeypatch.setattr(Rows, "step", failing)
    return errors


@pytest.fixture
def live():
    model, tokenizer = tiny_lm()
    with LiveServer(create_lm_app(from_lm(model, tokenizer, "tiny"), LMLimits())) as server:
        yield server


def post(server, body: dict) -> httpx.Response:
    return httpx.post(server.url + "/v1/completions", json=body, timeout=60)


def test_a_failing_step_fails_every_request_in_it_and_the_worker_steps_on(faulty):
    model, tokenizer = tiny_lm()
    worker = Worker(Rows(from_lm(model, tokenizer, "t").model), max_running=8, max_queue=8)

    async def run() -> list[list]:
        loop = asyncio.get_running_loop()
        await asyncio.to_thread(worker.start)
        jobs = [Job([Row([1, 2], Settings(5, greedy=True))], loop) for _ in range(2)]
        faulty.append(ValueError(BROKEN))
        with worker._ready:  # both queued before the worker looks: they join one step
            for job in jobs:
                worker.submit(job)
        later = Job([Row([1, 2], Settings(5, greedy=True))], loop)
        events = [await _events(job) for job in jobs]
        worker.submit(later)
        return events + [await _events(later)]

    try:
        first, second, later = asyncio.run(run())
    finally:
        worker.stop()
    for events in (first, second):
        assert isinstance(events[-1][1], StepFailed) and BROKEN in str(events[-1][1])
    assert sum(token is not None for _, token in later) == 5 and worker.failure is None


async def _events(job: Job) -> list:
    events = []
    while (event := await job.queue.get()) is not DONE:
        events.append(event)
    return events


@pytest.mark.parametrize("error", [ValueError, UsageError])  # a UsageError too: not the client's
def test_the_request_in_a_failing_step_gets_a_500_naming_it_and_the_next_one_its_answer(
        live, faulty, error):
    faulty.append(error(BROKEN))
    failed = post(live, {"prompt": "To be", "max_tokens": 4})
    error = failed.json()["error"]
    assert failed.status_code == 500 and BROKEN in error["message"], failed.text
    assert error["code"] == "internal_error" and error["type"] == "server_error"
    ok = post(live, {"prompt": "To be", "max_tokens": 4})
    assert ok.status_code == 200 and ok.json()["usage"]["completion_tokens"] == 4
    assert httpx.get(live.url + "/health").json()["status"] == "ok"


def test_a_dead_worker_fails_health_and_every_request_at_once(live, faulty):
    faulty.append(Fatal("the thread's end"))
    with httpx.stream("POST", live.url + "/v1/completions", timeout=60,
                      json={"prompt": "To be", "max_tokens": 50, "stream": True}) as s:
        lines = [line for line in s.iter_lines() if line]
    assert "worker_died" in lines[0] and lines[-1] == "data: [DONE]"  # answered, not hung
    health = httpx.get(live.url + "/health")
    assert health.status_code == 503 and health.json()["status"] == "failed"
    assert "Fatal: the thread's end" in health.json()["error"]["message"]
    later = post(live, {"prompt": "To be", "max_tokens": 4})
    assert later.status_code == 503 and later.json()["error"]["code"] == "worker_died"
