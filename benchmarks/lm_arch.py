"""The Llama block against the GPT-2 block (issue 35 part 4): the same parameter count, steps
and data, held-out loss per character, three seeds.

Both train with ``decoderkit lm train`` in a child process on ``make lm-demo``'s data and
recipe (BPE of 2,000 tokens on Shakespeare, block 64, batch 16, lr 2e-3 to 2e-4, 100 warm-up
steps (fewer for fewer steps), 2 threads), ``--steps`` steps each, seeds 0, 1, 2:

- GPT-2 block: ``lm train``'s default, nanoGPT's architecture at the demo's size (4 layers,
  width 128, 4 heads, FFN 512, LayerNorm, learned positions, GELU, biases): the demo's model;
- Llama block: ``--preset llama`` at the same size (RMSNorm, RoPE, SwiGLU, 2 key/value heads
  for 4 query heads, no biases), its FFN width chosen here so that its parameter count is the
  nearest to the GPT-2 block's (printed: the learned position table and the biases the Llama
  block lacks go into its wider FFN).

Each is scored by ``decoderkit lm eval`` on all of ``valid.txt`` (the held-out last 10%):
nats per character. Printed: each seed's loss per character, the mean and spread of each
block, and the Llama block's mean minus the GPT-2 block's (below 0: Llama is better).

    .venv/bin/python benchmarks/lm_arch.py [--data runs/shakespeare] [--steps 500]
        [--seeds 0 1 2] [--threads 2]

``--data`` is ``decoderkit lm data shakespeare --out DIR``'s directory (``shakespeare.txt``
and ``valid.txt``).
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # idle workers sleep: a shared CPU

import argparse  # noqa: E402
import re  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from dataclasses import replace  # noqa: E402
from pathlib import Path  # noqa: E402

from decoderkit.nn.lm.model import DecoderOnlyLM  # noqa: E402
from decoderkit.nn.lm.presets import lm_preset  # noqa: E402

VOCAB, BLOCK, LAYERS, WIDTH, HEADS = 2000, 64, 4, 128, 4  # make lm-demo's
RECIPE = ["--tokenizer", "bpe", "--vocab-size", str(VOCAB), "--block-size", str(BLOCK),
          "--batch-size", "16", "--lr", "2e-3", "--min-lr", "2e-4",
          "--layers", str(LAYERS), "--d-model", str(WIDTH), "--heads", str(HEADS),
          "--eval-blocks", "100", "--quiet"]


def parameters(config) -> int:
    return sum(p.numel() for p in DecoderOnlyLM(config).parameters())


def llama_ffn() -> tuple[int, int, int]:
    """(the Llama block's FFN width nearest the GPT-2 block's parameter count, its count, the
    GPT-2 block's count) at the demo's size."""
    gpt = replace(lm_preset("nanogpt"), vocab_size=VOCAB, n_layers=LAYERS, d_model=WIDTH,
                  n_heads=HEADS, d_ff=4 * WIDTH, max_len=BLOCK, dropout=0.0)
    llama = replace(lm_preset("llama"), vocab_size=VOCAB, n_layers=LAYERS, d_model=WIDTH,
                    n_heads=HEADS, max_len=BLOCK)
    target = parameters(gpt)
    counts = {f: parameters(replace(llama, d_ff=f)) for f in range(256, 513, 8)}
    best = min(counts, key=lambda f: abs(counts[f] - target))
    return best, counts[best], target


def train_and_score(arch: str, seed: int, args, d_ff: int, tmp: Path) -> tuple[float, float]:
    """(held-out nats per character, seconds of training) of one run."""
    out = tmp / f"{arch}-{seed}"
    shape = ["--preset", "llama", "--d-ff", str(d_ff)] if arch == "llama" else []
    data = Path(args.data)
    start = time.monotonic()
    subprocess.run([sys.executable, "-m", "decoderkit", "lm", "train", "--text",
                    str(data / "shakespeare.txt"), "--out", str(out), *RECIPE, *shape,
                    "--max-steps", str(args.steps), "--warmup", str(min(100, args.steps)),
                    "--valid-every", str(args.steps),
                    "--seed", str(seed), "--threads", str(args.threads)],
                   check=True, stdout=subprocess.DEVNULL)
    seconds = time.monotonic() - start
    done = subprocess.run([sys.executable, "-m", "decoderkit", "lm", "eval", "--checkpoint",
                           str(out), "--text", str(data / "valid.txt"), "--threads",
                           str(args.threads)], check=True, capture_output=True, text=True)
    found = re.search(r"loss per character ([0-9.]+)", done.stdout)
    if found is None:
        raise RuntimeError(f"lm eval printed no loss per character: {done.stdout[-300:]}")
    return float(found.group(1)), seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default="runs/shakespeare",
                        help="decoderkit lm data shakespeare --out DIR's directory")
    parser.add_argument("--steps", type=int, default=500, help="training steps of every run")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    if not (Path(args.data) / "valid.txt").is_file():
        sys.exit(f"{args.data}/valid.txt: missing; run: decoderkit lm data shakespeare --out "
                 f"{args.data}")
    d_ff, n_llama, n_gpt = llama_ffn()
    print(f"{args.steps} steps, seeds {args.seeds}, {args.threads} threads, load average "
          f"{os.getloadavg()[0]:.1f}; GPT-2 block {n_gpt:,} parameters, Llama block (FFN "
          f"{d_ff}) {n_llama:,} ({n_llama / n_gpt - 1:+.1%})")
    losses: dict[str, list[float]] = {"gpt2": [], "llama": []}
    with tempfile.TemporaryDirectory(prefix="decoderkit-bench-") as tmp:
        for seed in args.seeds:
            for arch in losses:
                loss, seconds = train_and_score(arch, seed, args, d_ff, Path(tmp))
                losses[arch].append(loss)
                print(f"  seed {seed} {arch:<6} held-out {loss:.4f} nats/char "
                      f"({seconds:.0f} s training, load {os.getloadavg()[0]:.1f})", flush=True)
    for arch, values in losses.items():
        spread = statistics.stdev(values) if len(values) > 1 else 0.0
        print(f"{arch:<6} mean {statistics.mean(values):.4f} nats/char (sd {spread:.4f}; "
              f"{', '.join(f'{v:.4f}' for v in values)})")
    delta = statistics.mean(losses["llama"]) - statistics.mean(losses["gpt2"])
    wins = sum(a < b for a, b in zip(losses["llama"], losses["gpt2"], strict=True))
    print(f"Llama - GPT-2: {delta:+.4f} nats/char (below 0: Llama better); Llama lower in "
          f"{wins} of {len(args.seeds)} seeds")


if __name__ == "__main__":
    main()
