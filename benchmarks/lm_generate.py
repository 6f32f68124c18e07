"""Sampling speed of a GPT-2-small-shaped model: ours (``generation.lm.complete``: one prefill,
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

int8 rows: ours through ``generation.int8.quantize_int8`` (every linear int8, fbgemm, what
``lm sample --int8`` runs) beside the same HF float32 cached ``generate`` (ratio printed), and
CTranslate2's int8 ``Generator`` on the HF model converted (``TransformersConverter`` on its
``save_pretrained`` directory with a synthetic GPT-2 vocabulary of the right size: the
converter needs a tokenizer, the engine only the token strings); greedy is
``sampling_topk=1``, sampling ``sampling_topk=0`` (the whole distribution). Printed: ours int8
/ HF float32 cache and ours int8 / CTranslate2 int8. Without ctranslate2 its column is "-".

    .venv/bin/python benchmarks/lm_generate.py [--new-tokens 128] [--batch 1 8]
        [--threads 2] [--repeats 2] [--skip-recompute]

Legend: B batch, P prompt length, N new tokens, V vocabulary.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # idle workers sleep: a shared CPU

import argparse  # noqa: E402
import copy  # noqa: E402
import json  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from functools import partial  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402

from decoderkit.generation.int8 import quantize_int8  # noqa: E402
from decoderkit.generation.lm.complete import generate  # noqa: E402
from decoderkit.nn.packing import prepack  # noqa: E402
from decoderkit.nn.lm.model import DecoderOnlyLM  # noqa: E402
from decoderkit.nn.lm.presets import lm_preset  # noqa: E402

PROMPT = 64


def hf_generate(model, prompts: torch.Tensor, new: int, greedy: bool, cache: bool) -> None:
    """HF generate for exactly ``new`` tokens (min = max length), sampling unfiltered."""
    sampling = {} if greedy else dict(top_k=0, top_p=1.0, temperature=1.0)
    with torch.inference_mode():
        model.generate(prompts, attention_mask=torch.ones_like(prompts), max_new_tokens=new,
                       min_new_tokens=new, do_sample=not greedy, use_cache=cache,
                       pad_token_id=0, **sampling)


def ctranslate2_int8(hf, directory: Path, threads: int, quantization: str = "int8"):
    """CTranslate2's Generator on ``hf`` converted in ``directory`` (int8, or
    ``quantization``); None without the package. ``hf`` is saved in ``directory / "hf"`` first
    (with the package or without) with synthetic tokenizer files: token i is "t<i>", the last
    <|endoftext|>."""
    V = hf.config.vocab_size
    hf.save_pretrained(directory / "hf")
    vocab = {f"t{i}": i for i in range(V - 1)} | {"<|endoftext|>": V - 1}
    (directory / "hf" / "vocab.json").write_text(json.dumps(vocab))
    (directory / "hf" / "merges.txt").write_text("#version: 0.2\n")
    try:
        import ctranslate2
        from ctranslate2.converters import TransformersConverter
    except ImportError:
        return None
    TransformersConverter(str(directory / "hf")).convert(str(directory / "ct2"),
                                                         quantization=quantization)
    return ctranslate2.Generator(str(directory / "ct2"), device="cpu",
                                 compute_type=quantization, intra_threads=threads)


def ct2_generate(generator, tokens: list[list[str]], new: int, greedy: bool) -> None:
    """CTranslate2 for exactly ``new`` tokens; top-k 1 is greedy, 0 the whole distribution."""
    generator.generate_batch(tokens, max_length=new, min_length=new, include_prompt_in_result=False,
                             sampling_topk=1 if greedy else 0, sampling_temperature=1.0)


def best_seconds(run, repeats: int) -> float:
    """The fastest of ``repeats`` calls of ``run()``."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return best


def cell(ours, packed, int8, hf, ct2, prompts: torch.Tensor, n: int, greedy: bool,
         args: argparse.Namespace) -> dict[str, float]:
    """Tokens per second of each engine for one batch and mode."""
    rows = prompts.tolist()
    seed = None if greedy else 0
    engines = {name: partial(generate, model, rows, max_new_tokens=n, greedy=greedy, seed=seed)
               for name, model in (("ours", ours), ("packed", packed), ("int8", int8))}
    engines["hf"] = partial(hf_generate, hf, prompts, n, greedy, True)
    if ct2 is not None:
        engines["ct2"] = partial(ct2_generate, ct2, [[f"t{i}" for i in r] for r in rows], n,
                                 greedy)
    for model in (ours, packed, int8):  # warm-up (the packed weights are made on first use)
        generate(model, rows, max_new_tokens=2, greedy=True)
    hf_generate(hf, prompts, 2, True, True)
    if ct2 is not None:
        ct2_generate(ct2, [[f"t{i}" for i in r] for r in rows], 2, True)
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
    int8 = quantize_int8(ours)
    hf = GPT2LMHeadModel(GPT2Config(resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)).eval()
    with tempfile.TemporaryDirectory() as tmp:  # the converted model is loaded into memory
        ct2 = ctranslate2_int8(hf, Path(tmp), args.threads)
    n = args.new_tokens
    print(f"GPT-2 small shape, prompt {PROMPT}, {n} new tokens, {args.threads} threads, "
          f"torch {torch.__version__}, load average {os.getloadavg()[0]:.1f}")
    print(f"{'batch':>5} {'mode':>8} | {'ours':>8} {'packed':>8} {'int8':>8} {'HF cache':>9} "
          f"{'HF none':>8} {'CT2 int8':>9} | tokens/s; ours / HF cache, ours / HF none, "
          f"int8 / HF cache, int8 / CT2 int8")
    for batch in args.batch:
        prompts = torch.randint(50257, (batch, PROMPT), generator=torch.Generator().manual_seed(1))
        for greedy in (True, False):
            rate = cell(ours, packed, int8, hf, ct2, prompts, n, greedy, args)
            mine = max(rate["ours"], rate["packed"])
            none = f"{rate['none']:8.1f}" if "none" in rate else f"{'-':>8}"
            ratio_none = f"{mine / rate['none']:.2f}x" if "none" in rate else "-"
            peer = f"{rate['ct2']:9.1f}" if "ct2" in rate else f"{'-':>9}"
            ratio_peer = f"{rate['int8'] / rate['ct2']:.2f}x" if "ct2" in rate else "-"
            print(f"{batch:>5} {'greedy' if greedy else 'sample':>8} | {rate['ours']:8.1f} "
                  f"{rate['packed']:8.1f} {rate['int8']:8.1f} {rate['hf']:9.1f} {none} {peer} | "
                  f"{mine / rate['hf']:.2f}x, {ratio_none}, {rate['int8'] / rate['hf']:.2f}x, "
                  f"{ratio_peer}", flush=True)
    print(f"load average at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
