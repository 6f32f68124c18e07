"""Character-level Shakespeare on the CPU: nanoGPT's published CPU recipe beside ``decoderkit lm
train``, the same wall-clock budget, the same split, the same threads.

The recipe (nanoGPT's README: 4 layers, 4 heads, width 128, block 64, batch 12, no dropout,
AdamW lr 1e-3, betas (0.9, 0.99), weight decay 0.1 on matrices, 100 warm-up steps then cosine
to 1e-4 at 2000 steps, gradient clipping 1.0) runs on Hugging Face ``GPT2LMHeadModel`` of that
shape with nanoGPT's architecture (exact-erf GELU), in a plain PyTorch loop written here, until
2000 steps or the budget. Ours is ``decoderkit lm train`` in a child process with ``--time-limit``
= the budget and ``make lm-demo``'s batch, rates and warm-up on characters (``OURS`` below; the
demo itself trains on BPE tokens since 2026-12-01, which this recipe is not). Both are
scored on all of the held-out text (the last 10% of the file, what ``lm train`` holds out) in
consecutive blocks of 64: the difference of the two losses is the goal's number (ours at least
0.10 lower). Separately, the time of one optimiser step on the recipe's shape (batch 12 x 64,
4 x 128) for both models, interleaved rounds, median: the step-time ratio (>= 1: ours faster).

    .venv/bin/python benchmarks/lm_train.py [--text runs/shakespeare/shakespeare.txt]
        [--budget 180] [--threads 2] [--steps 30] [--blocks N] [--step-time-only]

Legend: B batch, T block size, V vocabulary.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # idle workers sleep: a shared CPU

import argparse  # noqa: E402
import math  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from decoderkit.nn.lm.model import DecoderOnlyLM  # noqa: E402
from decoderkit.nn.lm.presets import lm_preset  # noqa: E402
from decoderkit.training.lm.checkpoint import load_lm_checkpoint  # noqa: E402
from decoderkit.training.lm.data import eval_blocks, load_text, random_batch  # noqa: E402
from decoderkit.training.lm.objective import NextToken, make_adamw  # noqa: E402
from decoderkit.training.objective import train_step  # noqa: E402

BLOCK, BATCH, LAYERS, HEADS, WIDTH = 64, 12, 4, 4, 128  # the recipe's shape
RECIPE = dict(lr=1e-3, min_lr=1e-4, warmup=100, decay=2000, max_steps=2000, clip=1.0,
              weight_decay=0.1, betas=(0.9, 0.99))
OURS = ["--block-size", "64", "--batch-size", "16", "--lr", "2e-3", "--min-lr", "2e-4",
        "--warmup", "100", "--max-steps", "3000", "--valid-every", "500",
        "--eval-blocks", "200"]  # make lm-demo's settings, characters


def nanogpt_rate(it: int) -> float:
    """nanoGPT's ``get_lr``: linear warm-up over (it + 1) / (warmup + 1), then cosine."""
    r = RECIPE
    if it < r["warmup"]:
        return r["lr"] * (it + 1) / (r["warmup"] + 1)
    if it > r["decay"]:
        return r["min_lr"]
    coeff = 0.5 * (1.0 + math.cos(math.pi * (it - r["warmup"]) / (r["decay"] - r["warmup"])))
    return r["min_lr"] + coeff * (r["lr"] - r["min_lr"])


def hf_model(vocab: int):
    """GPT2LMHeadModel with nanoGPT's CPU-recipe shape and architecture, random init."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(1337)
    return GPT2LMHeadModel(GPT2Config(
        vocab_size=vocab, n_positions=BLOCK, n_embd=WIDTH, n_layer=LAYERS, n_head=HEADS,
        activation_function="gelu", resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
        bos_token_id=None, eos_token_id=None))


def hf_optimizer(model) -> torch.optim.AdamW:
    """nanoGPT's ``configure_optimizers``: decay on parameters of dim >= 2 only."""
    params = [p for p in model.parameters() if p.requires_grad]
    return torch.optim.AdamW(
        [{"params": [p for p in params if p.dim() >= 2], "weight_decay": RECIPE["weight_decay"]},
         {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}],
        lr=RECIPE["lr"], betas=RECIPE["betas"])


def hf_step(model, optimizer, batch, it: int) -> float:
    """One step of nanoGPT's loop (no accumulation): rate, forward, backward, clip, AdamW."""
    for group in optimizer.param_groups:
        group["lr"] = nanogpt_rate(it)
    logits = model(batch.ids).logits  # (B, T, V)
    loss = F.cross_entropy(logits.flatten(0, 1), batch.labels.flatten())
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), RECIPE["clip"])
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return float(loss.detach())


def run_recipe(data, budget: float) -> tuple[object, int, float]:
    """The recipe until 2000 steps or ``budget`` seconds: (model, steps, seconds)."""
    model = hf_model(data.tokenizer.vocab_size).train()
    optimizer = hf_optimizer(model)
    start, it = time.monotonic(), 0
    while it < RECIPE["max_steps"] and time.monotonic() - start < budget:
        hf_step(model, optimizer, random_batch(data.train, BATCH, BLOCK, 1337, it), it)
        it += 1
    return model, it, time.monotonic() - start


def run_ours(text: str, budget: float, threads: int, out: Path) -> tuple[object, int, float]:
    """``decoderkit lm train`` with the demo's flags and the budget as its time limit."""
    command = [sys.executable, "-m", "decoderkit", "lm", "train", "--text", text, "--out",
               str(out), *OURS, "--time-limit", str(budget), "--threads", str(threads),
               "--quiet"]
    start = time.monotonic()
    subprocess.run(command, check=True)
    ckpt = load_lm_checkpoint(out)
    model, meta = ckpt.model, ckpt.meta
    return model, meta["step"], time.monotonic() - start


def held_out_loss(logits_of, blocks: list[torch.Tensor]) -> float:
    """Mean next-token loss over ``blocks`` with ``logits_of(ids (B, T)) -> (B, T, V)``."""
    total, count = 0.0, 0
    with torch.no_grad():
        for i in range(0, len(blocks), 64):
            chunk = torch.stack(blocks[i: i + 64])  # (B, T + 1)
            logits = logits_of(chunk[:, :-1])
            total += float(F.cross_entropy(logits.flatten(0, 1), chunk[:, 1:].flatten(),
                                           reduction="sum"))
            count += chunk[:, 1:].numel()
    return total / count


def step_times(data, steps: int) -> tuple[float, float]:
    """Median seconds of one optimiser step on the recipe's shape: (HF loop, ours)."""
    vocab = data.tokenizer.vocab_size
    hf = hf_model(vocab).train()
    hf_opt = hf_optimizer(hf)
    ours = DecoderOnlyLM(lm_preset("nanogpt", vocab_size=vocab, n_layers=LAYERS, d_model=WIDTH,
                                   n_heads=HEADS, d_ff=4 * WIDTH, max_len=BLOCK, dropout=0.0))
    objective = NextToken(ours.train())
    optimizer, scheduler = make_adamw(ours, lr=1e-3, min_lr=1e-4, warmup=100, total=2000,
                                      weight_decay=0.1, betas=(0.9, 0.99))
    times: dict[str, list[float]] = {"hf": [], "ours": []}
    for it in range(steps + 3):  # interleaved; the first three are warm-up
        batch = random_batch(data.train, BATCH, BLOCK, 7, it)
        t = time.perf_counter()
        hf_step(hf, hf_opt, batch, it)
        t_hf = time.perf_counter() - t
        t = time.perf_counter()
        train_step(objective, [batch], optimizer, scheduler, clip=1.0,
                   total_tokens=batch.n_tokens)
        t_ours = time.perf_counter() - t
        if it >= 3:
            times["hf"].append(t_hf)
            times["ours"].append(t_ours)
    return statistics.median(times["hf"]), statistics.median(times["ours"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--text", default="runs/shakespeare/shakespeare.txt",
                        help="decoderkit lm data shakespeare --out runs/shakespeare writes it")
    parser.add_argument("--budget", type=float, default=180.0, help="seconds of training each")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--steps", type=int, default=30, help="steps timed for the ratio")
    parser.add_argument("--step-time-only", action="store_true",
                        help="only the step-time ratio (no training runs)")
    parser.add_argument("--blocks", type=int, help="score on this many evenly spaced held-out "
                        "blocks (default: all; fewer for a quick run on a busy machine)")
    args = parser.parse_args()
    if not Path(args.text).is_file():
        sys.exit(f"{args.text}: missing; run: decoderkit lm data shakespeare --out "
                 f"{Path(args.text).parent}")
    torch.set_num_threads(args.threads)
    data = load_text([args.text], BLOCK)
    blocks = eval_blocks(data.valid, BLOCK, args.blocks)
    print(f"{args.threads} threads, load average {os.getloadavg()[0]:.1f}; held-out: "
          f"{sum(len(b) - 1 for b in blocks):,} tokens in {len(blocks)} blocks of {BLOCK}")
    if not args.step_time_only:
        compare(data, blocks, args)
    t_hf, t_ours = step_times(data, args.steps)
    print(f"one step, batch {BATCH} x {BLOCK}, {LAYERS} x {WIDTH}: HF {1000 * t_hf:.1f} ms, "
          f"ours {1000 * t_ours:.1f} ms, ratio {t_hf / t_ours:.2f}x (goal >= 1.0x); "
          f"load average now {os.getloadavg()[0]:.1f}")


def compare(data, blocks: list[torch.Tensor], args: argparse.Namespace) -> None:
    """Both trainings for the budget, scored on the same held-out blocks."""
    hf, hf_steps, hf_seconds = run_recipe(data, args.budget)
    hf_loss = held_out_loss(lambda ids: hf.eval()(ids).logits, blocks)
    print(f"nanoGPT recipe on HF GPT2LMHeadModel: {hf_steps} steps in {hf_seconds:.0f} s, "
          f"held-out loss {hf_loss:.4f}")
    with tempfile.TemporaryDirectory(prefix="decoderkit-bench-") as tmp:
        ours, our_steps, our_seconds = run_ours(args.text, args.budget, args.threads,
                                                Path(tmp) / "run")
    our_loss = held_out_loss(ours.eval(), blocks)
    print(f"decoderkit lm train (make lm-demo's settings, characters): best of {our_steps} steps, "
          f"{our_seconds:.0f} s with start-up, held-out loss {our_loss:.4f}")
    print(f"difference (recipe - ours): {hf_loss - our_loss:+.4f} (goal: >= +0.10)")


if __name__ == "__main__":
    main()
