"""The server on every engine: exports made here in CTranslate2 (float32 and int8) and ONNX
Runtime, and the checkpoint in int8, through the same API and the same batcher; each result
is what the engine gives translating that line alone, and a feature the engine lacks is a
422 naming it, before anything is queued."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from decoderkit.cli import main
from decoderkit.generation.seq2seq.translate import DecodeOptions, translate_lines
from decoderkit.interop.engines import open_export
from decoderkit.report.params import count_parameters
from decoderkit.serve.seq2seq.app import create_app
from decoderkit.serve.seq2seq.batcher import Batcher
from decoderkit.serve.seq2seq.engines import from_checkpoint, from_export
from decoderkit.serve.server import bind
from interop.export_helpers import random_checkpoint, random_lines

pytest.importorskip("ctranslate2")
pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")

# @pytest.mark.engines: the test that compares each engine's batched results with its lines
# alone, rerun under AVX2 by `make test` (the others check the API, flags and messages)

LINES = random_lines(6, seed=3) + [""]
GREEDY, BEAM = DecodeOptions(), DecodeOptions(beam=3)


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """(checkpoint, {engine: export directory}): one random model, exported twice."""
    from decoderkit.interop.seq2seq.ctranslate2 import export_ctranslate2
    from decoderkit.interop.onnx.export import export_onnx

    root = tmp_path_factory.mktemp("engines")
    ckpt = random_checkpoint(root / "ckpt", norm_first=False, tied=False, eos_bias=2.0)
    return ckpt, {"ctranslate2": export_ctranslate2(ckpt, root / "ct2"),
                  "onnxruntime": export_onnx(ckpt, root / "onnx")}


ENGINES = [("ctranslate2", False), ("ctranslate2", True), ("onnxruntime", False)]


def served(made, engine: str, int8: bool):
    """(the ``Served``, the reference: a translate call of the engine used directly)."""
    ckpt, dirs = made
    if engine == "decoderkit":
        return from_checkpoint(ckpt, int8), lambda lines, o: translate_lines(
            ckpt, lines, DecodeOptions(**{**vars(o), "int8": int8}))
    export = open_export(engine, dirs[engine], int8=int8, threads=1)
    return from_export(engine, export, int8), export.translate_lines


@pytest.mark.engines
@pytest.mark.parametrize("engine,int8", [*ENGINES, ("decoderkit", True)])
@pytest.mark.parametrize("options", [GREEDY, BEAM], ids=["greedy", "beam"])
def test_batched_requests_give_what_the_engine_gives_each_line_alone(made, engine, int8,
                                                                      options):
    model, alone = served(made, engine, int8)
    batcher = Batcher(lambda lines, o: model.translate(lines, o, 32), max_batch=32,
                      max_wait_ms=0, max_queue=100)
    jobs = [batcher.submit([line], options) for line in LINES]  # queued together: one call
    batcher.start()
    batcher.stop()
    assert batcher.stats.batches == 1 and batcher.stats.largest_batch == len(LINES)
    for line, job in zip(LINES, jobs, strict=True):  # int8 too: a scale per row
        (got,) = job.future.result()
        want = alone([line], options)[0]
        assert (got.text, got.stop_reason) == (want.text, want.stop_reason)
        assert got.score == pytest.approx(want.score, rel=1e-4, abs=1e-5)


@pytest.mark.parametrize("engine,int8", ENGINES)
def test_the_api_is_the_same_and_lacking_features_are_422_naming_the_engine(made, engine,
                                                                             int8):
    model, alone = served(made, engine, int8)
    name = f"{engine} int8" if int8 else engine
    with TestClient(create_app(model)) as client:
        info = client.get("/v1/model").json()
        assert info["engine"] == name and info["step"] == 0
        assert info["parameters"] == count_parameters(made[0].model)
        assert info["config"] == made[0].config.to_dict()
        r = client.post("/v1/translate", json={"inputs": LINES[:3], "beam": 2})
        assert r.status_code == 200, r.text
        want = alone(LINES[:3], DecodeOptions(beam=2))
        for got, w in zip(r.json()["results"], want, strict=True):
            assert got["text"] == w.text and got["tokens"] == w.tokens
            assert got["tokens"] and "".join(got["tokens"]).startswith(w.text)  # EOS or not
        lacking = {"explain": {"explain": 3}, "sampling": {"sampling": {"seed": 1}},
                   "n_best": {"beam": 2, "n_best": 2}}
        assert set(info["unavailable"]) <= set(lacking)
        assert "explain" in info["unavailable"]
        for feature, body in lacking.items():
            r = client.post("/v1/translate", json={"inputs": ["12"], **body})
            if feature not in info["unavailable"]:
                assert r.status_code == 200, r.text
                continue
            assert r.status_code == 422 and r.json()["field"] == feature, r.text
            assert f"not available with engine {name}" in r.json()["error"]
        decoded = client.get("/health").json()["sentences"]
        assert decoded == 3 + (0 if "sampling" in info["unavailable"] else 1) + \
            (0 if "n_best" in info["unavailable"] else 1)


def test_int8_checkpoint_serves_everything_explain_included(made):
    ckpt, _ = made
    with TestClient(create_app(from_checkpoint(ckpt, int8=True))) as client:
        info = client.get("/v1/model").json()
        assert info["engine"] == "decoderkit int8" and info["unavailable"] == {}
        assert info["parameters"] == count_parameters(ckpt.model)
        r = client.post("/v1/translate", json={"inputs": LINES[:2], "explain": 2})
    assert r.status_code == 200, r.text
    want = translate_lines(ckpt, LINES[:2], DecodeOptions(explain=2, int8=True))
    for got, w in zip(r.json()["results"], want, strict=True):
        assert got["text"] == w.text and len(got["steps"]) == len(w.steps) > 0


@pytest.fixture
def started(monkeypatch):
    """``decoderkit serve`` up to the start: the app it would serve (on a free loopback
    port, not listening for real)."""
    apps = []
    monkeypatch.setattr("decoderkit.serve.server.bind", lambda host, port: bind("127.0.0.1", 0))
    monkeypatch.setattr("decoderkit.serve.server.serve",
                        lambda app, sock, log_level: apps.append(app) or sock.close())
    return apps


@pytest.mark.parametrize("flags,engine", [
    (["--engine", "ctranslate2", "--int8"], "ctranslate2 int8"),
    (["--engine", "onnxruntime"], "onnxruntime"),
    (["--int8"], "decoderkit int8"),
])
def test_the_command_serves_each_engine(made, started, capsys, flags, engine):
    ckpt, dirs = made
    source = ["--checkpoint", str(ckpt.path)] if "--engine" not in flags else \
        ["--model", str(dirs[flags[1]])]
    assert main(["serve", *source, *flags, "--threads", "1"]) == 0
    assert f"({engine}" in capsys.readouterr().err
    with TestClient(started[0]) as client:
        assert client.get("/v1/model").json()["engine"] == engine
        r = client.post("/v1/translate", json={"inputs": ["12 Nov"]})
        assert r.status_code == 200 and r.json()["results"][0]["error"] is None


@pytest.mark.parametrize("flags,message", [
    (["--engine", "onnxruntime", "--int8"], "--int8 is not offered with --engine onnxruntime"),
    (["--engine", "ctranslate2"], "--engine ctranslate2 needs --model DIR"),
    (["--model", "X"], "--engine decoderkit needs --checkpoint DIR"),
])
def test_engine_flags_that_do_not_fit_are_one_line(made, started, capsys, flags, message):
    _, dirs = made
    flags = [str(dirs["onnxruntime"]) if f == "X" else f for f in flags]
    if "onnxruntime" in flags:
        flags += ["--model", str(dirs["onnxruntime"])]
    assert main(["serve", *flags]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and not started
