"""The compiled decode step's cost against the cache's capacity (issue 44 part 2): one batch-1
step of ``lm sample --compile``'s compiled ``decode_one_token`` beside the eager step, on a
random Llama-family model of one of ``llama_cpu.SHAPES`` (``--layers`` of them, 2 by
default), at 100 cached positions in rowwise caches of each ``--capacity``. The step attends
the used positions only: neither engine's time may grow with the capacity (a compiled graph
copying the whole cache each step took 98 ms at 2,048 positions against eager's 12.7).
Printed per capacity: the median step of each (its first calls compile: not timed) and the
ratio compiled / eager, and the largest logit difference.

    .venv/bin/python benchmarks/compiled_step.py [--shape smollm2-135m] [--layers 2]
        [--capacity 256 1024 2048] [--steps 20] [--threads 2]
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from llama_cpu import SHAPES  # noqa: E402

from decoderkit.generation.lm.compiled import compile_decoding  # noqa: E402
from decoderkit.nn.lm.model import DecoderOnlyLM  # noqa: E402

FILLED = 100  # positions cached before the timed steps


def step_ms(model: DecoderOnlyLM, capacity: int, steps: int) -> tuple[float, torch.Tensor]:
    """The median ms of a batch-1 step at position FILLED of a fresh rowwise cache, logits."""
    cache = model.new_cache(1, capacity, rowwise=True)
    ids, times = torch.tensor([[5]]), []
    with torch.inference_mode():
        for p in range(FILLED):
            model.decode_one_token(ids, cache, cache.at(torch.tensor([[p]])))
        for _ in range(steps):
            at = cache.at(torch.tensor([[FILLED]]))
            start = time.perf_counter()
            logits = model.decode_one_token(ids, cache, at)
            times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3, logits


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", choices=list(SHAPES), default="smollm2-135m")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--capacity", type=int, nargs="+", default=[256, 1024, 2048])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    eager = DecoderOnlyLM(replace(SHAPES[args.shape], n_layers=args.layers)).eval()
    compiled = compile_decoding(copy.deepcopy(eager))
    print(f"{args.shape} shape ({args.layers} layers), batch 1 at {FILLED} positions, "
          f"{args.threads} threads, torch {torch.__version__}, load {os.getloadavg()[0]:.1f}")
    print("  capacity  eager ms  compiled ms  compiled/eager  max |diff|")
    for capacity in args.capacity:
        e, a = step_ms(eager, capacity, args.steps)
        c, b = step_ms(compiled, capacity, args.steps)
        print(f"  {capacity:8d}  {e:8.2f}  {c:11.2f}  {c / e:14.2f}  {(a - b).abs().max():.1e}")


if __name__ == "__main__":
    main()
