"""Serving: `decoderkit serve` under 1-64 concurrent clients, batching on and off, every
engine; a soak.

Starts `decoderkit serve` on a free loopback port (a subprocess), then N concurrent clients
(asyncio, one keep-alive connection each) send one-sentence requests (held-out dates of the
built-in task) until ``--requests`` are answered or ``--time-limit`` seconds pass. Printed per
client count: requests/s, sentences/s, and p50/p95/p99 latency. The same load runs against a
second server with batching off (``--max-batch 1 --max-wait-ms 0``), and the goals are checked
in the same run: at 16 clients sentences/s >= 4x the one-client rate (batching on); p99 at
4 clients <= 2x the one-client p99; one client with batching on within 10% of batching off
(p50 and requests/s; both servers up, measured in alternating slices so that the machine's
other load weighs on both alike). Then ``--engine-clients`` clients against each of
``--engines``, measured the same way (the
checkpoint in PyTorch float32 and int8, its CTranslate2 export in float32 and int8 compute,
its ONNX export in ONNX Runtime; exports written to a temporary directory), each server with
``--server-threads``: goal, CTranslate2 int8 >= 3x the sentences/s of PyTorch float32. The
soak sends a few thousand mixed valid and invalid requests (bad JSON, wrong types,
out-of-range options, oversize bodies, unknown fields and routes, clients that hang up) and
reports the server's RSS before and after and the 5xx count.

    .venv/bin/python benchmarks/serve.py [--checkpoint runs/dates] [--clients 1 4 16 64]
        [--requests 400] [--time-limit 30] [--soak 3000] [--soak-time 120] [--server-threads 1]
        [--engines decoderkit decoderkit-int8 ctranslate2 ctranslate2-int8 onnxruntime]
        [--engine-clients 16]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from decoderkit.training.seq2seq.tasks import task_pairs

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


MODES = (("on", ()), ("off", ("--max-batch", "1", "--max-wait-ms", "0")))  # batching
ENGINES = ("decoderkit", "decoderkit-int8", "ctranslate2", "ctranslate2-int8", "onnxruntime")


class Server:
    """``decoderkit serve`` in a subprocess; ``rss()`` reads its resident memory. ``flags``
    name the model (--checkpoint DIR, or --engine E --model DIR) and anything else."""

    def __init__(self, threads: int, *flags: str):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "decoderkit", "serve", "--port", str(self.port),
             "--threads", str(threads), "--log-level", "error", *flags], env=env)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"decoderkit serve exited with {self.proc.returncode}")
            try:
                httpx.get(self.url + "/health", timeout=1)
                return
            except httpx.TransportError:
                time.sleep(0.2)
        raise SystemExit("decoderkit serve did not start")

    def rss_mib(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        raise RuntimeError("no VmRSS")

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=60)


class Connection:
    """One keep-alive HTTP/1.1 connection doing the least client work per request, so that
    the load generator is not what gets measured: on the shared 2-core machine httpx's
    AsyncClient managed about 110 GET /health per second with 16 clients, this 800-2600."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, port: int) -> Connection:
        return cls(*await asyncio.open_connection("127.0.0.1", port))

    async def post(self, path: str, body: bytes) -> tuple[int, bytes]:
        """Send one request; (status, body) of the answer (uvicorn sends Content-Length)."""
        self.writer.write(b"POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                          b"application/json\r\nContent-Length: %d\r\n\r\n%s"
                          % (path.encode(), len(body), body))
        status = int((await self.reader.readline()).split()[1])
        length = 0
        while (line := await self.reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        return status, await self.reader.readexactly(length)

    def close(self) -> None:
        self.writer.close()


async def load(port: int, clients: int, sentences: list[str], total: int,
               time_limit: float, inputs: int = 1) -> dict:
    """``clients`` concurrent loops of requests of ``inputs`` sentences; latencies of the
    answered ones."""
    latencies, errors, sent = [], 0, 0
    start = time.perf_counter()

    async def client(k: int):
        nonlocal errors, sent
        conn = await Connection.open(port)
        try:
            while sent < total and time.perf_counter() - start < time_limit:
                body = json.dumps({"inputs": [sentences[(sent * 7 + k + i) % len(sentences)]
                                              for i in range(inputs)]})
                sent += 1
                t0 = time.perf_counter()
                status, _ = await conn.post("/v1/translate", body.encode())
                latencies.append(time.perf_counter() - t0)
                errors += status != 200
        finally:
            conn.close()

    await asyncio.gather(*(client(k) for k in range(clients)))
    return summary(clients, latencies, errors, time.perf_counter() - start, inputs)


def summary(clients: int, latencies: list[float], errors: int, wall: float,
            inputs: int = 1) -> dict:
    q = statistics.quantiles(latencies, n=100, method="inclusive")
    return {"clients": clients, "requests": len(latencies), "errors": errors, "wall": wall,
            "rps": len(latencies) / wall, "sps": inputs * len(latencies) / wall,
            "latencies": latencies,
            "p50": q[49] * 1e3, "p95": q[94] * 1e3, "p99": q[98] * 1e3}


def interleaved(servers: dict[str, Server], clients: int, sentences: list[str], total: int,
                time_limit: float, inputs: int = 1, rounds: int = 10) -> dict[str, dict]:
    """The same load on several servers in ``rounds`` alternating slices, so that a machine
    whose other load drifts during the run weighs on each alike; one summary per server."""
    parts: dict[str, list[dict]] = {name: [] for name in servers}
    for _ in range(rounds):
        for name, server in servers.items():
            parts[name].append(asyncio.run(load(server.port, clients, sentences,
                                                total // rounds, time_limit / rounds, inputs)))
    return {name: summary(clients, [t for r in rs for t in r["latencies"]],
                          sum(r["errors"] for r in rs), sum(r["wall"] for r in rs), inputs)
            for name, rs in parts.items()}


def run_mode(name: str, server: Server, args, sentences: list[str]) -> dict[int, dict]:
    asyncio.run(load(server.port, 4, sentences, 40, 20))  # warm-up
    rows = {}
    print(f"\nbatching {name}")
    print(f"{'clients':>7} {'requests':>8} {'req/s':>8} {'sent/s':>8} {'p50 ms':>8} "
          f"{'p95 ms':>8} {'p99 ms':>8} {'errors':>6}")
    for n in args.clients:
        r = asyncio.run(load(server.port, n, sentences, args.requests, args.time_limit))
        rows[n] = r
        print(f"{n:>7} {r['requests']:>8} {r['rps']:>8.1f} {r['sps']:>8.1f} {r['p50']:>8.1f} "
              f"{r['p95']:>8.1f} {r['p99']:>8.1f} {r['errors']:>6}", flush=True)
    return rows


def engine_flags(checkpoint: str, exports: Path) -> dict[str, list[str]]:
    """Each engine's serve flags; the checkpoint exported (float32 weights) into ``exports``
    for the engines that need it."""
    from decoderkit.interop.checkpoints import load_checkpoint
    from decoderkit.interop.seq2seq.ctranslate2 import export_ctranslate2
    from decoderkit.interop.onnx.export import export_onnx

    ckpt = load_checkpoint(checkpoint)
    ct2, onnx = export_ctranslate2(ckpt, exports / "ct2"), export_onnx(ckpt, exports / "onnx")
    return {"decoderkit": ["--checkpoint", checkpoint],
            "decoderkit-int8": ["--checkpoint", checkpoint, "--int8"],
            "ctranslate2": ["--engine", "ctranslate2", "--model", str(ct2)],
            "ctranslate2-int8": ["--engine", "ctranslate2", "--model", str(ct2), "--int8"],
            "onnxruntime": ["--engine", "onnxruntime", "--model", str(onnx)]}


def run_engines(args, sentences: list[str]) -> dict[str, dict]:
    """``--engine-clients`` clients against a server of each engine (batching on), all
    servers up at once and measured in alternating slices."""
    n = args.engine_clients
    print(f"\nengines, {n} clients, {args.engine_inputs} sentence(s) per request, batching "
          f"on, server threads {args.server_threads}, measured in alternating slices")
    with tempfile.TemporaryDirectory() as tmp:
        flags = engine_flags(args.checkpoint, Path(tmp))
        servers = {}
        try:
            for name in args.engines:
                servers[name] = Server(args.server_threads, *flags[name])
                asyncio.run(load(servers[name].port, 4, sentences, 40, 20))  # warm-up
            rows = interleaved(servers, n, sentences, args.requests, args.time_limit,
                               args.engine_inputs)
        finally:
            for server in servers.values():
                server.stop()
    print(f"{'engine':>17} {'requests':>8} {'req/s':>8} {'sent/s':>8} {'p50 ms':>8} "
          f"{'p99 ms':>8} {'errors':>6} {'x float32':>9}")
    for name, r in rows.items():
        base = rows.get("decoderkit", r)["sps"]
        print(f"{name:>17} {r['requests']:>8} {r['rps']:>8.1f} {r['sps']:>8.1f} "
              f"{r['p50']:>8.1f} {r['p99']:>8.1f} {r['errors']:>6} {r['sps'] / base:>8.2f}x")
    return rows


def lone_client(args, sentences: list[str]) -> dict[str, dict]:
    """One client, batching on and off, in alternating slices."""
    servers = {}
    try:
        for name, flags in MODES:
            servers[name] = Server(args.server_threads, "--checkpoint", args.checkpoint, *flags)
            asyncio.run(load(servers[name].port, 1, sentences, 20, 10))  # warm-up
        rows = interleaved(servers, 1, sentences, args.requests, args.time_limit)
    finally:
        for server in servers.values():
            server.stop()
    print("\none client, batching on and off in alternating slices")
    for name, r in rows.items():
        print(f"batching {name:>3}: {r['requests']} requests, {r['rps']:.1f} req/s, p50 "
              f"{r['p50']:.1f} ms, p99 {r['p99']:.1f} ms, errors {r['errors']}")
    return rows


def goal(text: str, value: float, met: bool) -> None:
    print(f"goal: {text} = {value:.2f}x: {'met' if met else 'NOT met'}")


def soak_requests(sentences: list[str], rng: random.Random):
    """One soak request: (method, path, content bytes or None, headers, hang up?)."""
    text = rng.choice(sentences)
    js = {"Content-Type": "application/json"}
    valid = [
        {"inputs": [text]},
        {"inputs": [rng.choice(sentences) for _ in range(rng.randint(1, 8))]},
        {"inputs": [text], "beam": rng.randint(2, 4), "n_best": 2},
        {"inputs": [text], "explain": 3},
        {"inputs": [text], "sampling": {"seed": rng.randint(0, 99), "top_k": 5}},
        {"inputs": [text, ""], "max_len": rng.randint(1, 30)},
    ]
    invalid = [
        b"{not json", b'{"inputs": "x"}', b'{"inputs": []}', b'{"inputs": ["a"], "beam": 99}',
        b'{"inputs": ["a"], "beam": "2"}', b'{"inputs": ["a"], "typo": 1}',
        b'{"inputs": ["a"], "sampling": {"top_p": 0}}', b"[]", b"null",
        b'{"inputs": ["' + b"9" * 70_000 + b'"]}', b'{"inputs": ["a"], "max_len": 1e9}',
        json.dumps({"inputs": ["x" * 600]}).encode(), "{\"inputs\": [\"\udcff\"]}".encode(
            "utf-8", "surrogatepass"),
    ]
    kind = rng.random()
    if kind < 0.45:
        return "POST", "/v1/translate", json.dumps(rng.choice(valid)).encode(), js, False
    if kind < 0.9:
        return "POST", "/v1/translate", rng.choice(invalid), js, False
    if kind < 0.95:
        return rng.choice(["GET", "DELETE"]), rng.choice(["/v1/translate", "/nope", "/v1/model"]), \
            None, {}, False
    return "POST", "/v1/translate", json.dumps({"inputs": [text] * 8}).encode(), js, True


async def soak(server: Server, sentences: list[str], total: int, time_limit: float,
               clients: int = 16) -> dict:
    rng = random.Random(0)
    statuses: dict[int, int] = {}
    hung_up, done = 0, 0
    start = time.perf_counter()

    async def client():
        nonlocal hung_up, done
        async with httpx.AsyncClient(base_url=server.url, timeout=120) as http:
            while done < total and time.perf_counter() - start < time_limit:
                done += 1
                method, path, content, headers, hang_up = soak_requests(sentences, rng)
                if hang_up:  # a client that leaves before its answer
                    try:
                        await http.request(method, path, content=content, headers=headers,
                                           timeout=0.005)
                    except httpx.TimeoutException:
                        hung_up += 1
                    continue
                r = await http.request(method, path, content=content, headers=headers)
                statuses[r.status_code] = statuses.get(r.status_code, 0) + 1

    await asyncio.gather(*(client() for _ in range(clients)))
    return {"requests": done, "statuses": dict(sorted(statuses.items())), "hung_up": hung_up,
            "wall": time.perf_counter() - start}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--checkpoint", default=str(ROOT / "runs" / "dates"),
                   help="a checkpoint directory (make demo writes runs/dates)")
    p.add_argument("--clients", type=int, nargs="*", default=[1, 4, 16, 64],
                   help="client counts, batching on and off (none: skip these and the "
                   "one-client comparison)")
    p.add_argument("--requests", type=int, default=400, help="requests per client count")
    p.add_argument("--time-limit", type=float, default=30.0, help="seconds per client count")
    p.add_argument("--soak", type=int, default=3000, help="soak requests (0: no soak)")
    p.add_argument("--soak-time", type=float, default=120.0, help="soak time limit, seconds")
    p.add_argument("--server-threads", type=int, default=1, help="the server's threads")
    p.add_argument("--engines", nargs="*", choices=ENGINES, default=list(ENGINES),
                   help="engines compared at --engine-clients (none: skip)")
    p.add_argument("--engine-clients", type=int, default=16, help="clients in the engine rows")
    p.add_argument("--engine-inputs", type=int, default=1,
                   help="sentences per request in the engine rows")
    args = p.parse_args()
    if not (Path(args.checkpoint) / "model.safetensors").exists():
        raise SystemExit(f"no checkpoint in {args.checkpoint}: run `make demo` first")
    _, valid = task_pairs("dates", 1, 500, seed=1)
    sentences = [src for src, _ in valid]
    print(f"checkpoint {args.checkpoint}; one-sentence requests (engine rows: "
          f"{args.engine_inputs}); server threads "
          f"{args.server_threads}; {os.cpu_count()} CPUs shared by client and server")

    results: dict[str, dict] = {"on": {}}
    for name, flags in MODES if args.clients else ():
        server = Server(args.server_threads, "--checkpoint", args.checkpoint, *flags)
        try:
            results[name] = run_mode(name, server, args, sentences)
        finally:
            server.stop()
    lone = lone_client(args, sentences) if args.clients else {}
    engines = run_engines(args, sentences) if args.engines else {}

    on = results["on"]
    print()
    if 1 in on and 16 in on:
        ratio = on[16]["sps"] / on[1]["sps"]
        goal("16 clients / 1 client sentences/s (batching on, goal >= 4x)", ratio, ratio >= 4)
    if 1 in on and 4 in on:
        ratio = on[4]["p99"] / on[1]["p99"]
        goal("p99 at 4 clients / 1 client (batching on, goal <= 2x)", ratio, ratio <= 2)
    if lone:
        ratio = lone["on"]["p50"] / lone["off"]["p50"]
        goal("one client p50, batching on / off (goal <= 1.10x)", ratio, ratio <= 1.10)
        ratio = lone["on"]["rps"] / lone["off"]["rps"]
        goal("one client requests/s, batching on / off (goal >= 0.90x)", ratio, ratio >= 0.90)
    if "decoderkit" in engines and "ctranslate2-int8" in engines:
        ratio = engines["ctranslate2-int8"]["sps"] / engines["decoderkit"]["sps"]
        goal(f"{args.engine_clients} clients sentences/s, CTranslate2 int8 / decoderkit float32 "
             f"(goal >= 3x)", ratio, ratio >= 3)

    if args.soak:
        server = Server(args.server_threads, "--checkpoint", args.checkpoint)
        try:
            # warm-up: the same mix, so first-use allocations (beam, explain) happen before
            asyncio.run(soak(server, sentences, args.soak // 10, args.soak_time / 10))
            before = server.rss_mib()
            s = asyncio.run(soak(server, sentences, args.soak, args.soak_time))
            time.sleep(1.0)  # the hung-up requests' batches finish
            after = server.rss_mib()
            fivexx = sum(n for code, n in s["statuses"].items() if code >= 500)
            print(f"\nsoak: {s['requests']} requests in {s['wall']:.0f} s, statuses "
                  f"{s['statuses']}, {s['hung_up']} hung up; 5xx: {fivexx}")
            print(f"soak: server RSS {before:.0f} MiB before, {after:.0f} MiB after "
                  f"({100 * (after - before) / before:+.1f}%, goal within 10%); "
                  f"exit status after SIGTERM: {server.stop()}")
        finally:
            if server.proc.poll() is None:
                server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
