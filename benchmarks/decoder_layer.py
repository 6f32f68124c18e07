"""One DecoderLayer forward beside nn.TransformerDecoderLayer with the same weights.

Eval mode, no grad, causal target mask. Both layers are timed in the same run,
interleaved (ours, torch, ours, torch, ...), and the median of the repeats is reported
with the ratio and the achieved GFLOP/s. Torch runs twice: with the same bool causal
mask as ours, and with its ``tgt_is_causal=True`` hint (which lets it drop the mask and
ask SDPA for ``is_causal``). Goal: ours no slower than PyTorch's.

    .venv/bin/python benchmarks/decoder_layer.py [--threads 2] [--repeats 9] [--profile]

Legend: B batch, T target length, S source length, d = d_model, f = d_ff.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from decoderkit.interop.torch_nn import to_torch
from decoderkit.nn.layers import BlockSpec, DecoderLayer
from decoderkit.nn.masks import causal_mask, to_torch_mask


def layer_flops(B: int, T: int, S: int, d: int, f: int) -> int:
    """Multiply-adds x 2 of one decoder-layer forward (dense; the causal half is not skipped)."""
    self_proj = 2 * B * T * d * 4 * d  # q, k, v and output projections
    cross_proj = 2 * B * T * d * 2 * d + 2 * B * S * d * 2 * d  # q, out on T; k, v on S
    scores = 2 * 2 * B * T * (T + S) * d  # Q K^T and weights V, both attentions, all heads
    ffn = 2 * 2 * B * T * d * f
    return self_proj + cross_proj + scores + ffn


def time_once(fn, iters: int) -> float:
    """Seconds per call over ``iters`` calls."""
    start = time.perf_counter()
    for _ in range(iters):
        fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return (time.perf_counter() - start) / iters


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--tgt-len", type=int, default=128)
    p.add_argument("--src-len", type=int, default=128)
    p.add_argument("--d-model", type=int, default=512)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--d-ff", type=int, default=2048)
    p.add_argument("--norm-first", action="store_true")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: all)")
    p.add_argument("--repeats", type=int, default=9, help="interleaved timing rounds")
    p.add_argument("--iters", type=int, default=2, help="calls per timing round")
    p.add_argument("--device", default="cpu")
    p.add_argument("--profile", action="store_true", help="print a torch.profiler table of ours")
    a = p.parse_args()
    if a.threads is not None:
        torch.set_num_threads(a.threads)
    torch.manual_seed(0)

    spec = BlockSpec(a.d_model, a.heads, a.d_ff, dropout=0.1, norm_first=a.norm_first)
    ours = DecoderLayer(spec).to(a.device).eval()
    theirs = to_torch(ours).eval()
    x = torch.randn(a.batch, a.tgt_len, a.d_model, device=a.device)  # (B, T, d)
    memory = torch.randn(a.batch, a.src_len, a.d_model, device=a.device)  # (B, S, d)
    mask = causal_mask(a.tgt_len, device=a.device)  # (T, T), True = may attend
    blocked = to_torch_mask(mask)  # torch convention, True = blocked

    runs = {
        "ours": lambda: ours(x, memory, None, mask),
        "torch (same bool mask)": lambda: theirs(x, memory, tgt_mask=blocked),
        "torch (tgt_is_causal)": lambda: theirs(x, memory, tgt_mask=blocked, tgt_is_causal=True),
    }
    with torch.no_grad():
        reference = runs["ours"]()
        for name, fn in list(runs.items())[1:]:
            diff = (fn() - reference).abs().max().item()
            print(f"max |{name} - ours| = {diff:.2e}")
        for fn in runs.values():  # warm-up
            time_once(fn, a.iters)
        times = {name: [] for name in runs}
        for _ in range(a.repeats):
            for name, fn in runs.items():
                times[name].append(time_once(fn, a.iters))
        if a.profile:
            from torch.profiler import ProfilerActivity, profile
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                time_once(runs["ours"], a.iters)
            print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=15))

    flops = layer_flops(a.batch, a.tgt_len, a.src_len, a.d_model, a.d_ff)
    print(f"DecoderLayer forward: B={a.batch} T={a.tgt_len} S={a.src_len} d={a.d_model} "
          f"h={a.heads} f={a.d_ff} norm_first={a.norm_first} fp32 eval no-grad, "
          f"{torch.get_num_threads()} threads, {a.device}, torch {torch.__version__}")
    print(f"{a.repeats} interleaved rounds x {a.iters} calls; median ms (GFLOP/s), "
          f"{flops / 1e9:.2f} GFLOP per call")
    base = statistics.median(times["ours"])
    for name, ts in times.items():
        t = statistics.median(ts)
        print(f"  {name:24s} {1e3 * t:9.2f} ms  ({flops / t / 1e9:7.1f} GFLOP/s)  "
              f"torch/ours time ratio {t / base:.3f}")


if __name__ == "__main__":
    main()
