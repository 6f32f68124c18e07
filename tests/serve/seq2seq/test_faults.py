"""The translation server's worker: a failing translate fails its request alone (a 500 in the
one error shape); a dead worker makes /health and every request fail at once."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from decoderkit.serve.seq2seq.app import create_app
from decoderkit.training.seq2seq.checkpoint import load_checkpoint
from serve.serving import varied_checkpoint


class Fatal(BaseException):
    """Not an Exception: what no handler catches (the thread dies)."""


@pytest.fixture
def client(tmp_path):
    app = create_app(load_checkpoint(varied_checkpoint(tmp_path / "ckpt")))
    with TestClient(app, raise_server_exceptions=False) as c:
        batcher, translate = app.state.batcher, app.state.batcher.translate
        errors = []

        def failing(lines, options):
            if errors:
                raise errors.pop()
            return translate(lines, options)

        batcher.translate = failing
        yield c, errors


def test_a_failing_translate_is_a_500_naming_it_and_the_next_request_is_served(client):
    c, errors = client
    errors.append(ValueError("the model broke"))
    failed = c.post("/v1/translate", json={"inputs": ["12"]})
    assert failed.status_code == 500 and failed.json()["field"] == "server"
    assert "ValueError: the model broke" in failed.json()["error"]
    assert c.post("/v1/translate", json={"inputs": ["12"]}).status_code == 200
    assert c.get("/health").json()["status"] == "ok"


def test_a_dead_worker_fails_health_and_every_request_at_once(client):
    c, errors = client
    errors.append(Fatal("the thread's end"))
    died = c.post("/v1/translate", json={"inputs": ["12"]})
    assert died.status_code == 503 and "Fatal: the thread's end" in died.json()["error"]
    health = c.get("/health")
    assert health.status_code == 503 and health.json()["status"] == "failed"
    later = c.post("/v1/translate", json={"inputs": ["12"]})
    assert later.status_code == 503 and "worker died" in later.json()["error"]
