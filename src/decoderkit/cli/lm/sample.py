"""``decoderkit lm sample``: continue a prompt, printing tokens as they come."""

from __future__ import annotations

import argparse

from decoderkit.base.errors import UsageError
from decoderkit.cli.args import integer
from decoderkit.cli.lm.common import CHECKPOINT_HELP, load
from decoderkit.cli.shape import add_sampling_flags, add_threads, set_threads


def add(lm) -> None:
    """The ``lm sample`` parser: checkpoint, prompt and the sampling flags."""
    p = lm.add_parser("sample", help="continue a prompt",
                      description="Continue --prompt, batched over --num-samples, with the key/"
                      "value cache, printing tokens as they come. The model sees at most its "
                      "context length: a longer prompt keeps its last tokens, and past the "
                      "context each token is computed from the last context-length tokens "
                      "(a sliding window, its cache recomputed: nanoGPT's crop, exact).")
    p.add_argument("--checkpoint", required=True, metavar="DIR", help=CHECKPOINT_HELP)
    p.add_argument("--prompt", required=True, help="the text to continue")
    p.add_argument("--max-new-tokens", type=integer(1, 1_000_000), default=200,
                   help="tokens generated per sample")
    add_sampling_flags(p)
    p.add_argument("--greedy", action="store_true", help="the most likely token each step")
    p.add_argument("--num-samples", type=integer(1, 1024), default=1,
                   help="samples, generated as one batch")
    add_threads(p)
    p.add_argument("--int8", action="store_true",
                   help="int8 linears with dynamic activation quantization (x86 CPUs; "
                   "tokens may differ slightly from float32)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Generate, printing the first sample as it comes and the others when done."""
    from decoderkit.generation.lm import generate
    from decoderkit.training.lm.tokenizer import TextStream

    set_threads(args)
    if args.greedy and (args.temperature != 1.0 or args.top_k or args.top_p != 1.0):
        raise UsageError("--greedy takes no --temperature, --top-k or --top-p")
    model, tokenizer = load(args.checkpoint)
    if args.int8:  # a quantized copy; refused with one line where fbgemm is missing
        from decoderkit.generation.int8 import quantize_int8

        model = quantize_int8(model)
    prompt = tokenizer.encode(args.prompt)
    if not prompt:
        raise UsageError("--prompt is empty; give at least one character")
    stream = TextStream(tokenizer)

    def show(step: int, tokens: list[int]) -> None:
        if step == 0:  # the prompt once the arguments have passed generate's checks
            print(args.prompt, end="", flush=True)
        print(stream.push(tokens[0]), end="", flush=True)

    samples = generate(model, [prompt] * args.num_samples, max_new_tokens=args.max_new_tokens,
                       temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
                       greedy=args.greedy, seed=args.seed, on_step=show)
    print(stream.flush())
    for i, sample in enumerate(samples[1:], 2):
        print(f"--- sample {i} ---\n{args.prompt}{tokenizer.decode(sample)}")
    return 0
