"""``decoderkit lm sample``: continue a prompt, printing tokens as they come."""

from __future__ import annotations

import argparse

from decoderkit.base.errors import UsageError
from decoderkit.cli.args import integer, pathname, text
from decoderkit.cli.engines import dtype_of, use_compile_flags
from decoderkit.cli.lm.common import (
    add_adapter,
    CHECKPOINT_HELP,
    add_generation_flags,
    check_generation_flags,
    settle_flags,
    open_lm,
)
from decoderkit.cli.shape import set_threads


def add(lm) -> None:
    """The ``lm sample`` parser: checkpoint, prompt and the sampling flags."""
    p = lm.add_parser("sample", help="continue a prompt",
                      description="Continue --prompt, batched over --num-samples, with the key/"
                      "value cache, printing tokens as they come. The model sees at most its "
                      "context length: a longer prompt keeps its last tokens, and past the "
                      "context each token is computed from the last context-length tokens "
                      "(a sliding window, its cache recomputed: nanoGPT's crop, exact). A "
                      "sample ends at the end-of-text token where the vocabulary has one, at a "
                      "--stop text or after --max-new-tokens.")
    p.add_argument("--checkpoint", required=True, metavar="DIR", type=pathname,
                   help=CHECKPOINT_HELP)
    add_adapter(p)
    p.add_argument("--prompt", required=True, type=text, help="the text to continue")
    add_generation_flags(p, "sample")
    p.add_argument("--num-samples", type=integer(1, 1024), default=1,
                   help="samples, generated as one batch")
    p.add_argument("--ignore-eos", action="store_true",
                   help="go on past the end-of-text tokens (GPT-2's <|endoftext|>, and each id "
                   "of a Hugging Face directory's generation_config.json eos_token_id)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Generate, printing the first sample as it comes and the others when done."""
    from decoderkit.generation.lm.complete import generate
    from decoderkit.generation.lm.rowwise import for_inference
    from decoderkit.generation.lm.stops import TextStream

    set_threads(args)
    check_generation_flags(args)
    use_compile_flags(args)
    dtype = dtype_of(args)
    ckpt = open_lm(args.checkpoint, adapter=args.adapter)
    tokenizer, s = ckpt.tokenizer, settle_flags(args, ckpt.generation, "lm sample")
    # int8: refused with one line without fbgemm; compile: the step compiles at the first token
    model = for_inference(ckpt.model, args.int8, args.compile, args.autotune, dtype)
    prompt = tokenizer.encode_prompt(args.prompt)
    if not prompt:
        raise UsageError("--prompt is empty; give at least one character")
    ends = frozenset() if args.ignore_eos else ckpt.end_ids
    stream = TextStream(tokenizer, args.stop)

    def show(step: int, tokens: list[int | None]) -> None:
        if step == 0:  # the prompt once the arguments have passed generate's checks
            print(args.prompt, end="", flush=True)
        if tokens[0] is not None and tokens[0] not in ends and not stream.stopped:
            print(stream.push(tokens[0]), end="", flush=True)

    samples = generate(model, [prompt] * args.num_samples, max_new_tokens=s.max_new_tokens,
                       temperature=s.temperature, top_k=s.top_k, top_p=s.top_p,
                       greedy=s.greedy, seed=args.seed, on_step=show, eos_id=sorted(ends),
                       stop=args.stop, decode=tokenizer.decode, vocab=ckpt.vocab)
    print(stream.flush())
    for i, sample in enumerate(samples[1:], 2):
        text = TextStream(tokenizer, args.stop)
        for token in sample:
            if token in ends or text.stopped:
                break
            text.push(token)
        print(f"--- sample {i} ---\n{args.prompt}{text.text}")
    return 0
