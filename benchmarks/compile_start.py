"""``serve --compile``'s start-up, first and second (issue 44's goal: the second start at most
20 s to ``/health`` on two cores), in one run.

A random Llama-family model of one of ``llama_cpu.SHAPES`` (``--layers`` fewer layers for a
quick run) is written as an ``lm export --to transformers`` directory; ``decoderkit serve
--checkpoint DIR --compile [--autotune] --compile-cache CACHE`` starts twice on a fresh cache
directory, each time timed from the process's start to the first ``GET /health`` answering
200 (the server answers once its warm-up compiled the one-row and several-row steps), and
killed after; printed: both times, their ratio, the resident memory after the start (VmRSS,
MiB) over the float32 weights' bytes, and the cache directory's size.

    .venv/bin/python benchmarks/compile_start.py [--shape smollm2-135m] [--layers N]
        [--threads 2] [--autotune]
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # idle workers sleep: a shared CPU

import argparse  # noqa: E402
import json  # noqa: E402
import socket  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from dataclasses import replace  # noqa: E402
from pathlib import Path  # noqa: E402

import httpx  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from llama_cpu import SHAPES, tokenizer, weight_bytes  # noqa: E402

from decoderkit.nn.lm.model import DecoderOnlyLM  # noqa: E402

MB = 1 << 20


def start(directory: Path, cache: Path, threads: int, autotune: bool) -> tuple[float, float]:
    """One ``serve --compile`` start: (seconds to /health, VmRSS MiB then); the server is
    stopped after."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    begin = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "decoderkit", "serve", "--checkpoint",
                             str(directory), "--port", str(port), "--threads", str(threads),
                             "--log-level", "warning", "--compile", "--compile-cache",
                             str(cache), *(["--autotune"] if autotune else [])])
    try:
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if proc.poll() is not None:
                raise RuntimeError("the server exited before answering /health")
            time.sleep(0.1)
        seconds = time.perf_counter() - begin
        status = Path(f"/proc/{proc.pid}/status").read_text().splitlines()
        rss = next(int(line.split()[1]) / 1024 for line in status if line.startswith("VmRSS:"))
        return seconds, rss
    finally:
        proc.terminate()
        proc.wait(60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", choices=list(SHAPES), default="smollm2-135m")
    parser.add_argument("--layers", type=int, help="fewer layers than the shape's")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--autotune", action="store_true")
    args = parser.parse_args()
    config = SHAPES[args.shape]
    if args.layers:
        config = replace(config, n_layers=args.layers)
    torch.manual_seed(0)
    model = DecoderOnlyLM(config).eval()
    nbytes = weight_bytes(model)
    from decoderkit.interop.llama.hf_export import export_llama

    with tempfile.TemporaryDirectory() as tmp:
        d, cache = Path(tmp) / "model", Path(tmp) / "cache"
        export_llama(model, tokenizer(config.vocab_size), d)
        del model
        first, rss1 = start(d, cache, args.threads, args.autotune)
        second, rss2 = start(d, cache, args.threads, args.autotune)
        cached = sum(f.stat().st_size for f in cache.rglob("*") if f.is_file())
    print(f"{args.shape} shape ({config.n_layers} layers, width {config.d_model}), serve "
          f"--compile{' --autotune' if args.autotune else ''}, {args.threads} threads, torch "
          f"{torch.__version__}, load average {os.getloadavg()[0]:.1f}")
    print(f"  first start {first:.1f} s, second {second:.1f} s (second/first {second / first:.2f};"
          f" goal <= 20 s); resident {rss1:.0f} / {rss2:.0f} MiB = "
          f"{rss1 * MB / nbytes:.2f}x / {rss2 * MB / nbytes:.2f}x the float32 weights "
          f"({nbytes / MB:.0f} MiB); cache {cached / MB:.0f} MiB")
    print(json.dumps({"first_s": first, "second_s": second, "rss_mb": [rss1, rss2],
                      "weights_mb": nbytes / MB, "cache_mb": cached / MB,
                      "load": os.getloadavg()[0]}))


if __name__ == "__main__":
    main()
