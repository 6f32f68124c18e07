"""A real ``decoderkit serve`` process on a loopback port: concurrent requests batched, /health
while a batch decodes, a client that hangs up, SIGTERM draining; and the command's flags."""

from __future__ import annotations

import socket
import threading
import time

import httpx
import pytest

from decoderkit.base.errors import UsageError
from decoderkit.cli import main
from decoderkit.generation.seq2seq.translate import DecodeOptions, translate_lines
from decoderkit.serve.seq2seq.app import create_app
from decoderkit.serve.server import bind as real_bind
from decoderkit.serve.server import is_loopback
from decoderkit.training.seq2seq.checkpoint import load_checkpoint
from serve.serving import Server, batching_server, slow_checkpoint, varied_checkpoint

LONG = {"inputs": ["12 mar 2020"] * 16, "max_len": 500}  # about a second of decoding
TIMEOUT = 120


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = batching_server(tmp_path_factory.mktemp("server"))
    yield s
    s.stop()


@pytest.fixture(scope="module")
def ckpt_dir(tmp_path_factory):
    return varied_checkpoint(tmp_path_factory.mktemp("cli") / "ckpt")


class Request(threading.Thread):
    """A POST /v1/translate in the background; ``.response`` once done."""

    def __init__(self, url: str, body: dict):
        super().__init__(daemon=True)
        self.url, self.body, self.response = url, body, None
        self.start()

    def run(self):
        self.response = httpx.post(self.url + "/v1/translate", json=self.body, timeout=TIMEOUT)


def wait_busy(server: Server) -> dict:
    """Poll /health until the worker is decoding; returns that /health answer."""
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        health = server.health()
        if health["busy"]:
            return health
        time.sleep(0.01)
    raise AssertionError("the worker never started decoding")


def test_health_answers_while_a_batch_decodes(server):
    long = Request(server.url, LONG)
    health = wait_busy(server)  # /health answered with the worker mid-batch
    assert health["busy"] == len(LONG["inputs"]) and long.is_alive()
    long.join()
    assert long.response.status_code == 200


def test_requests_arriving_together_are_one_batch_each_as_alone(server):
    lines = ["1 jan 2001", "22", "dec 31 1999", "7", "mar 3 2003", "oct 10", "9 9 9", "x"]
    long = Request(server.url, LONG)
    wait_busy(server)  # the worker is busy: the next requests queue up together
    before = server.health()
    short = [Request(server.url, {"inputs": [line]}) for line in lines]
    for r in [long, *short]:
        r.join()
    after = server.health()
    assert after["batches"] - before["batches"] <= 3  # the long one, then one or two batches
    assert after["largest_batch"] >= len(lines) // 2
    ckpt = load_checkpoint(server.checkpoint)
    for line, r in zip(lines, short, strict=True):
        (got,) = r.response.json()["results"]
        want = translate_lines(ckpt, [line], DecodeOptions())[0]
        assert (got["text"], got["tokens"]) == (want.text, want.tokens)
        assert got["score"] == pytest.approx(want.score, rel=1e-5)


def test_a_client_that_hangs_up_costs_nothing_else(server):
    long = Request(server.url, LONG)
    wait_busy(server)
    before = server.health()["dropped"]
    body = b'{"inputs": ["5 5 2005"], "beam": 2}'
    with socket.create_connection(("127.0.0.1", server.port)) as s:  # queued behind LONG
        s.sendall(b"POST /v1/translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                  b"\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        deadline = time.monotonic() + TIMEOUT  # the request is queued; then the client goes
        while server.health()["queued"] == 0 and time.monotonic() < deadline:  # away
            time.sleep(0.01)
        assert server.health()["queued"] == 1
    long.join()
    assert long.response.status_code == 200
    deadline = time.monotonic() + TIMEOUT
    while server.health()["dropped"] == before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.health()["dropped"] == before + 1
    r = httpx.post(server.url + "/v1/translate", json={"inputs": ["5 5 2005"], "beam": 2},
                   timeout=TIMEOUT)
    assert r.status_code == 200 and r.json()["results"][0]["text"]


def test_sigterm_drains_in_flight_requests_then_exits_0(tmp_path):
    s = Server(slow_checkpoint(tmp_path / "slow"), "--token", "t0k")
    long = Request(s.url, LONG)  # no token: refused at once
    long.join()
    assert long.response.status_code == 401
    headers = {"Authorization": "Bearer t0k"}
    done = []
    body = {**LONG, "inputs": LONG["inputs"][:4]}  # a shorter decode is enough here
    worker = threading.Thread(target=lambda: done.append(httpx.post(
        s.url + "/v1/translate", json=body, headers=headers, timeout=TIMEOUT)), daemon=True)
    worker.start()
    deadline = time.monotonic() + TIMEOUT
    while not s.health()["busy"] and time.monotonic() < deadline:
        time.sleep(0.01)
    assert s.stop() == 0  # SIGTERM while the request decodes
    worker.join()
    assert done[0].status_code == 200
    assert len(done[0].json()["results"]) == len(body["inputs"])


@pytest.mark.parametrize("flag,value,expected", [
    ("--port", "70000", "expected an integer in [1, 65535], got '70000'"),
    ("--max-batch", "0", "expected an integer in [1, 4096], got '0'"),
    ("--max-wait-ms", "nan", "expected a finite number in [0, 60000], got 'nan'"),
    ("--max-body-bytes", "-1", "expected an integer in [1, 1073741824], got '-1'"),
    ("--max-body-bytes", "2147483648",
     "expected an integer in [1, 1073741824], got '2147483648'"),
])
def test_bad_flags_are_refused_naming_the_flag(ckpt_dir, capsys, flag, value, expected):
    assert main(["serve", "--checkpoint", str(ckpt_dir), flag, value]) == 2
    assert f"argument {flag}: {expected}" in capsys.readouterr().err


@pytest.fixture
def loopback(monkeypatch):
    """``bind`` on a free loopback port whatever --host/--port say (no public port, no clash
    with a server on 8000); the addresses asked, in order."""
    asked = []

    def bind(host, port):
        asked.append((host, port))
        return real_bind("127.0.0.1", 0)

    monkeypatch.setattr("decoderkit.serve.server.bind", bind)
    return asked


def test_a_port_in_use_is_one_line_and_exit_2_before_loading(tmp_path, capsys):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        missing = tmp_path / "not-loaded"  # bound first: the checkpoint is never read
        assert main(["serve", "--checkpoint", str(missing), "--port", str(port)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"--port {port}: 127.0.0.1:{port} is already in use" in err


def test_the_bound_port_is_held_until_the_server_takes_it():
    """No race between the check and uvicorn's start: the socket ``bind`` returns already
    listens, so a second server cannot take the port in between."""
    sock = real_bind("127.0.0.1", 0)
    with sock:
        port = sock.getsockname()[1]
        with pytest.raises(UsageError, match=f"127.0.0.1:{port} is already in use"):
            real_bind("127.0.0.1", port)
        with socket.create_connection(("127.0.0.1", port), timeout=10):
            pass  # accepted into the backlog while the model loads


@pytest.mark.parametrize("token", ["pässword", "two words", "tab\tbed", "nul\x00", "bell\x07",
                                   "emoji\U0001f600", " "])
@pytest.mark.parametrize("from_env", [False, True])
def test_a_token_no_header_can_carry_is_refused_at_start(ckpt_dir, capsys, monkeypatch, loopback,
                                                         token, from_env):
    if from_env and "\x00" in token:
        pytest.skip("an environment variable cannot hold NUL")
    served = []
    monkeypatch.setattr("decoderkit.serve.server.serve", lambda *a: served.append(a))
    if from_env:
        monkeypatch.setenv("DECODERKIT_TOKEN", token)
    flags = [] if from_env else ["--token", token]
    assert main(["serve", "--checkpoint", str(ckpt_dir), *flags]) == 2
    err = capsys.readouterr().err
    assert "--token (or $DECODERKIT_TOKEN) must be visible ASCII characters without spaces" \
        in err
    assert token.strip() == "" or token not in err  # the secret is not echoed
    assert err.count("\n") == 1 and not served and not loopback


def test_the_python_api_checks_the_token_too(ckpt_dir):
    with pytest.raises(UsageError, match="U\\+00E9 at position 2"):
        create_app(load_checkpoint(ckpt_dir), token="pé")


def test_max_len_flag_beyond_the_model_is_one_line(ckpt_dir, capsys, monkeypatch, loopback):
    monkeypatch.setattr("decoderkit.serve.server.serve", lambda *a: None)
    assert main(["serve", "--checkpoint", str(ckpt_dir), "--max-len", "1000"]) == 2
    assert "max_len must be <= the model's max_len 96, got 1000" in capsys.readouterr().err


def test_a_non_loopback_host_warns_and_the_token_comes_from_the_environment(
        ckpt_dir, capsys, monkeypatch, loopback):
    served = []
    monkeypatch.setattr("decoderkit.serve.server.serve",
                        lambda app, sock, log_level: served.append((app, sock)) or sock.close())
    monkeypatch.setenv("DECODERKIT_TOKEN", "from-env")
    assert main(["serve", "--checkpoint", str(ckpt_dir), "--host", "0.0.0.0"]) == 0
    err = capsys.readouterr().err
    assert "warning: 0.0.0.0 is not a loopback address" in err and "no --token" not in err
    from fastapi.testclient import TestClient

    app = served[0][0]
    with TestClient(app) as c:
        assert c.get("/v1/model").status_code == 401
        assert c.get("/v1/model", headers={"Authorization": "Bearer from-env"}).status_code == 200
    monkeypatch.delenv("DECODERKIT_TOKEN")
    assert main(["serve", "--checkpoint", str(ckpt_dir), "--host", "example.org"]) == 0
    assert "(no --token set)" in capsys.readouterr().err
    assert main(["serve", "--checkpoint", str(ckpt_dir)]) == 0
    assert "warning" not in capsys.readouterr().err
    assert loopback == [("0.0.0.0", 8000), ("example.org", 8000), ("127.0.0.1", 8000)]


@pytest.mark.parametrize("host,loopback", [("127.0.0.1", True), ("localhost", True),
                                           ("::1", True), ("127.8.0.1", True),
                                           ("0.0.0.0", False), ("192.168.1.5", False),
                                           ("::", False), ("example.org", False)])
def test_is_loopback(host, loopback):
    assert is_loopback(host) is loopback


def test_compile_on_a_translation_model_is_one_line(ckpt_dir, capsys, monkeypatch, loopback):
    monkeypatch.setattr("decoderkit.serve.server.serve", lambda *a: None)
    assert main(["serve", "--checkpoint", str(ckpt_dir), "--compile"]) == 2
    err = capsys.readouterr().err
    assert "--compile compiles an LM's decode step" in err and "translation model" in err
    assert err.count("\n") == 1
