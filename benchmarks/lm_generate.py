"""Sampling speed of a GPT-2-small-shaped model: ours (``generation.lm.generate``: one prefill,
then one token a step on the cache) beside Hugging Face ``GPT2LMHeadModel.generate`` with its
cache and without it (``use_cache=False`` recomputes the whole prefix every step, as nanoGPT's
``generate`` does).

Sizes (the issue's): 12 layers, width 768, 12 heads, vocabulary 50257, random float32 weights
(each model its own: speed does not depend on the values, and every engine makes exactly the
requested number of tokens), a 64-token prompt, 128 new tokens, batch 1 and 8, greedy and
sampling (temperature 1, no filter), 2 threads. Ours runs on plain ``nn.Linear``s (what
``decoderkit lm sample`` uses) and on a ``prepack``ed model. Each cell runs the engines in
interleaved rounds and keeps each one's best; the cache-less engine runs once. Printed:
generated tokens per second (B x new tokens / seconds) and the ratios ours / HF cached (goal
>= 1.5x) and ours / recompute (goal >= 5x), ours being the faster of its two rows.

    .venv/bin/python benchmarks/lm_generate.py [--new-tokens 128] [--batch 1 8]
        [--threads 2] [--repeats 2] [--skip-recompute]

Legend: B batch, P prompt length, N new tokens, V vocabulary.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # idle workers sleep: a shared CPU

import argparse  # noqa: E402
import copy  # noqa: E402
import time  # noqa: E402
from functools import partial  # noqa: E402

import torch  # noqa: E402

from decoderkit.generation.lm import generate  # noqa: E402
from decoderkit.generation.packing import prepack  # noqa: E402
from decoderkit.nn.lm import DecoderOnlyLM, lm_preset  # noqa: E402

PROMPT = 64


def hf_generate(model, prompts: torch.Tensor, new: int, greedy: bool, cache: bool) -> None:
    """HF generate for exactly ``new`` tokens (min = max length), sampling unfiltered."""
    sampling = {} if greedy else dict(top_k=0, top_p=1.0, temperature=1.0)
    with torch.inference_mode():
        model.generate(prompts, attention_mask=torch.ones_like(prompts), max_new_tokens=new,
                       min_new_tokens=new, do_sample=not greedy, use_cache=cache,
                       pad_token_id=0, **sampling)


def best_seconds(run, repeats: int) -> float:
    """The fastest of ``repeats`` calls of ``run()``."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return best


def cell(ours, packed, hf, prompts: torch.Tensor, n: int, greedy: bool,
         args: argparse.Namespace) -> dict[str, float]:
    """Tokens per second of each engine for one batch and mode."""
    rows = prompts.tolist()
    seed = None if greedy else 0
    engines = {"ours": partial(generate, ours, rows, max_new_tokens=n, greedy=greedy, seed=seed),
               "packed": partial(generate, packed, rows, max_new_tokens=n, greedy=greedy,
                                 seed=seed),
               "hf": partial(hf_generate, hf, prompts, n, greedy, True)}
    for model in (ours, packed):  # warm-up (the packed weights are made on first use)
        generate(model, rows, max_new_tokens=2, greedy=True)
    hf_generate(hf, prompts, 2, True, True)
    seconds: dict[str, float] = {}
    for _ in range(args.repeats):  # interleaved rounds, best of each
        for name, run in engines.items():
            seconds[name] = min(seconds.get(name, float("inf")), best_seconds(run, 1))
    if not args.skip_recompute:
        seconds["none"] = best_seconds(partial(hf_generate, hf, prompts, n, greedy, False), 1)
    return {k: prompts.size(0) * n / v for k, v in seconds.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--skip-recompute", action="store_true",
                        help="leave out HF use_cache=False (the slowest by far)")
    args = parser.parse_args()
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    ours = DecoderOnlyLM(lm_preset("gpt2", dropout=0.0)).eval()
    packed = prepack(copy.deepcopy(ours))
    hf = GPT2LMHeadModel(GPT2Config(resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)).eval()
    n = args.new_tokens
    print(f"GPT-2 small shape, prompt {PROMPT}, {n} new tokens, {args.threads} threads, "
          f"torch {torch.__version__}, load average {os.getloadavg()[0]:.1f}")
    print(f"{'batch':>5} {'mode':>8} | {'ours':>8} {'packed':>8} {'HF cache':>9} "
          f"{'HF none':>8} | tokens/s; ours / HF cache, ours / HF none")
    for batch in args.batch:
        prompts = torch.randint(50257, (batch, PROMPT), generator=torch.Generator().manual_seed(1))
        for greedy in (True, False):
            rate = cell(ours, packed, hf, prompts, n, greedy, args)
            mine = max(rate["ours"], rate["packed"])
            none = f"{rate['none']:8.1f}" if "none" in rate else f"{'-':>8}"
            ratio_none = f"{mine / rate['none']:.2f}x" if "none" in rate else "-"
            print(f"{batch:>5} {'greedy' if greedy else 'sample':>8} | {rate['ours']:8.1f} "
                  f"{rate['packed']:8.1f} {rate['hf']:9.1f} {none} | "
                  f"{mine / rate['hf']:.2f}x, {ratio_none}", flush=True)
    print(f"load average at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
