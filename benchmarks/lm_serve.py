"""The LM server's four goals (issue 24), measured in one run as ratios.

A random GPT-2-small-shaped model (``--layers``/``--width`` shrink it for a quick run) is saved
as a Hugging Face directory with a synthetic vocabulary (``lm_generate.ctranslate2_int8``'s:
token i is "t<i>"), served by ``decoderkit serve --checkpoint`` in a subprocess (float32,
rowwise kernels, ``--threads``) and driven over HTTP by streaming clients sending token-id
prompts (``--prompt`` tokens, ``--new-tokens`` new, end-of-text banned by ``logit_bias`` so
every request makes exactly that many). Printed:

1. C concurrent clients: total tokens/s over one client's (goal >= 6x), and over CTranslate2's
   ``generate_batch`` (no HTTP) of the same C prompts at once on the converted model, float32,
   run in a child process without this script's ``OMP_WAIT_POLICY=PASSIVE``, its best (goal
   >= 1.0x);
2. a lone client's time to first token and mean time between tokens over ``lm sample``'s
   in-process (``generate`` on the same rowwise model, timed by its ``on_step``; goal <=
   1.10x each; the clients share one connection pool, as the openai package's do), each the
   mean of ``ROUNDS`` runs, the two alternating;
3. C clients arriving at uniformly random times over ``--spread`` seconds: the median time
   between tokens over the lone client's (both rounds' gaps; goal <= 2x);
4. the server's resident memory while C requests run, over weights + C caches + 300 MB
   (goal <= 1.0).

    .venv/bin/python benchmarks/lm_serve.py [--clients 16] [--new-tokens 128] [--prompt 64]
        [--threads 2] [--spread 10] [--layers 12] [--width 768]
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # idle workers sleep: a shared CPU

import argparse  # noqa: E402
import json  # noqa: E402
import random  # noqa: E402
import socket  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import httpx  # noqa: E402
import torch  # noqa: E402

from decoderkit.generation.lm.complete import generate  # noqa: E402
from decoderkit.generation.lm.rowwise import rowwise  # noqa: E402
from decoderkit.interop.gpt.hf import load_hf_gpt  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from lm_generate import ctranslate2_int8  # noqa: E402

MB = 1 << 20
ROUNDS = 2  # lone-client and lm-sample runs, alternated
# CTranslate2's generate_batch, run in a child process without the OMP_WAIT_POLICY=PASSIVE this
# script sets: its OpenMP threads then wait spinning, its best (1.15-1.2x faster at 16 prompts;
# benchmarks/README.md). argv: model directory, threads, new tokens; stdin: the prompts (JSON).
PEER = """
import json, sys, time
import ctranslate2
directory, threads, new = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
tokens = [[f"t{i}" for i in p] for p in json.loads(sys.stdin.read())]
g = ctranslate2.Generator(directory, device="cpu", compute_type="float32", intra_threads=threads)
run = dict(include_prompt_in_result=False, sampling_topk=0)
g.generate_batch(tokens[:2], max_length=4, min_length=4, **run)  # warm-up
begin = time.perf_counter()
g.generate_batch(tokens, max_length=new, min_length=new, **run)
print(len(tokens) * new / (time.perf_counter() - begin))
"""


# One client for every request, as the openai package keeps one: its connections are reused,
# and making one (an SSL context, certifi's bundle: 60-80 ms here, more under load) is not
# counted in a request's time to first token.
CLIENT = httpx.Client(timeout=3600, limits=httpx.Limits(max_connections=64))


def stream(url: str, prompt: list[int], new: int, eos: int, start: float = 0.0) -> list[float]:
    """One streaming request after ``start`` seconds; the times its tokens arrived, counted
    from when it was sent."""
    time.sleep(start)
    body = {"prompt": prompt, "max_tokens": new, "temperature": 1.0, "seed": 0, "stream": True,
            "logit_bias": {str(eos): -100}}
    sent, times = time.perf_counter(), []
    with CLIENT.stream("POST", url + "/v1/completions", json=body) as r:
        for line in r.iter_lines():
            if line.startswith("data: {") and '"finish_reason"' in line:
                times.append(time.perf_counter() - sent)
    assert len(times) == new, f"{len(times)} tokens, not {new}"
    return times


def clients(url: str, prompts: list[list[int]], new: int, eos: int,
            starts: list[float]) -> tuple[float, list[list[float]]]:
    """All prompts as concurrent streaming clients; (wall seconds, each one's token times)."""
    out: list[list[float]] = [[] for _ in prompts]

    def run(i: int) -> None:
        out[i] = stream(url, prompts[i], new, eos, starts[i])

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(prompts))]
    begin = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - begin, out


def gaps(times: list[float]) -> list[float]:
    return [b - a for a, b in zip(times, times[1:], strict=False)]


def in_process(model, prompt: list[int], new: int) -> tuple[float, float]:
    """``lm sample``'s loop: (time to first token, mean time between tokens)."""
    stamps: list[float] = []
    begin = time.perf_counter()
    generate(model, [prompt], max_new_tokens=new, seed=0,
             on_step=lambda step, tokens: stamps.append(time.perf_counter() - begin))
    return stamps[0], statistics.mean(gaps(stamps))


def rss_mb(pid: int, field: str = "VmRSS") -> float:
    """The process's resident memory (or another /proc status ``field``: RssFile, the shared
    libraries' pages among it), in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field}")


def start_server(directory: Path, threads: int, clients_: int) -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "decoderkit", "serve", "--checkpoint",
                             str(directory), "--port", str(port), "--threads", str(threads),
                             "--max-batch", str(max(clients_, 1)), "--log-level", "warning",
                             "--max-tokens", str(1 << 20)])
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 600
    while True:
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return proc, url
        except httpx.TransportError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("the server did not start")
        time.sleep(0.2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--prompt", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--spread", type=float, default=10.0)
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--width", type=int, default=768)
    args = parser.parse_args()
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    hf = GPT2LMHeadModel(GPT2Config(n_layer=args.layers, n_embd=args.width,
                                    n_head=max(1, args.width // 64), resid_pdrop=0.0,
                                    embd_pdrop=0.0, attn_pdrop=0.0)).eval()
    C, P, V = args.clients, args.prompt, hf.config.vocab_size
    g = torch.Generator().manual_seed(1)
    prompts = torch.randint(V - 1, (C, P), generator=g).tolist()
    with tempfile.TemporaryDirectory(prefix="lmserve-bench-") as tmp:
        converted = ctranslate2_int8(hf, Path(tmp), args.threads, quantization="float32")
        ct2 = None if converted is None else Path(tmp) / "ct2"
        del converted  # timed in a child process (PEER)
        ours = rowwise(load_hf_gpt(Path(tmp) / "hf")[0])
        proc, url = start_server(Path(tmp) / "hf", args.threads, C)
        try:
            report(args, url, proc.pid, ours, ct2, prompts, hf.config)
        finally:
            proc.terminate()
            proc.wait(timeout=120)


def report(args, url: str, pid: int, ours, ct2: Path | None, prompts: list[list[int]],
           config) -> None:
    C, N, P, V = args.clients, args.new_tokens, args.prompt, config.vocab_size
    eos = V - 1
    print(f"GPT-2 shape {args.layers} layers x {args.width}, prompt {P}, {N} new tokens, "
          f"{C} clients, {args.threads} threads, torch {torch.__version__}, load average "
          f"{os.getloadavg()[0]:.1f}", flush=True)
    stream(url, prompts[0], 4, eos)  # warm-up
    in_process(ours, prompts[0], 4)
    lones, samples = [], []
    for _ in range(ROUNDS):  # alternating: the machine's drift falls on both sides alike
        lones.append(stream(url, prompts[0], N, eos))
        samples.append(in_process(ours, prompts[0], N))
    lone_rate = ROUNDS * N / sum(times[-1] for times in lones)
    lone_gaps = [g for times in lones for g in gaps(times)]
    first, between = statistics.mean(t[0] for t in lones), statistics.mean(lone_gaps)
    ttft, tbt = (statistics.mean(s[i] for s in samples) for i in (0, 1))
    print(f"2. lone client ({ROUNDS} rounds, alternating with lm sample): first token "
          f"{first * 1e3:.0f} ms vs lm sample {ttft * 1e3:.0f} ms ({first / ttft:.2f}x, goal <= "
          f"1.10x); between tokens {between * 1e3:.1f} ms vs {tbt * 1e3:.1f} ms "
          f"({between / tbt:.2f}x, goal <= 1.10x); by round: "
          + ", ".join(f"{statistics.mean(gaps(t)) * 1e3:.1f} / {s[1] * 1e3:.1f} ms"
                      for t, s in zip(lones, samples, strict=True)), flush=True)
    peak, files = [0.0], [0.0]
    done = threading.Event()

    def sample_rss() -> None:
        while not done.wait(0.05):  # a short run (--layers 2) lasts a fraction of a second
            rss = rss_mb(pid)
            if rss > peak[0]:
                peak[0], files[0] = rss, rss_mb(pid, "RssFile")

    watcher = threading.Thread(target=sample_rss)
    watcher.start()
    wall, _ = clients(url, prompts, N, eos, [0.0] * C)
    done.set()
    watcher.join()
    rate = C * N / wall
    line = f"1. {C} clients: {rate:.1f} tokens/s vs one client {lone_rate:.1f} " \
           f"({rate / lone_rate:.2f}x, goal >= 6x)"
    if ct2 is not None:
        env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
        peer = float(subprocess.run(
            [sys.executable, "-c", PEER, str(ct2), str(args.threads), str(N)], env=env,
            input=json.dumps(prompts), capture_output=True, text=True, check=True).stdout)
        line += f"; CTranslate2 float32 generate_batch {peer:.1f} ({rate / peer:.2f}x, goal " \
                f">= 1.0x)"
    print(line, flush=True)
    draw = random.Random(0)  # one generator: a fresh Random(0) per client gave all one time
    starts = sorted(draw.uniform(0, args.spread) for _ in range(C))
    _, spread = clients(url, prompts, N, eos, starts)
    median = statistics.median(g for times in spread for g in gaps(times))
    print(f"3. {C} clients over {args.spread:.0f} s: median between tokens {median * 1e3:.1f} "
          f"ms vs lone {statistics.median(lone_gaps) * 1e3:.1f} ms "
          f"({median / statistics.median(lone_gaps):.2f}x, goal <= 2x)", flush=True)
    weights = sum(p.numel() * p.element_size() for p in ours.parameters()) / MB
    weights += sum(b.numel() * b.element_size() for b in ours.buffers()) / MB
    cache = C * 2 * config.n_layer * (P + N) * config.n_embd * 4 / MB
    print(f"4. resident memory with {C} running: {peak[0]:.0f} MB vs weights {weights:.0f} + "
          f"caches {cache:.0f} + 300 MB ({peak[0] / (weights + cache + 300):.2f}, goal <= 1.0; "
          f"{files[0]:.0f} MB of it the libraries' file pages)")
    print(f"load average at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
