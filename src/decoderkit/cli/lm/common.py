"""What several ``lm`` subcommands share: the --checkpoint help and opening it (an LM, or a
fine-tuned classifier), and the generation flags of ``lm sample`` and ``lm chat``."""

from __future__ import annotations

import argparse

from decoderkit.base.errors import UsageError
from decoderkit.cli.args import integer, text
from decoderkit.cli.shape import add_sampling_flags, add_threads

CHECKPOINT_HELP = ("an LM run directory (lm train), a Hugging Face gpt2/openai-gpt directory "
                   "or a nanoGPT ckpt.pt")


def load(checkpoint: str, instead: str = "decoderkit translate"):
    """(model, tokenizer) of any LM --checkpoint; a model without a tokenizer is refused, a
    translation model named with the command to use ``instead``."""
    from decoderkit.interop.checkpoints import LM, TRANSLATION, load_checkpoint

    ckpt = load_checkpoint(checkpoint, families=(LM,), use={TRANSLATION: instead})
    model, tokenizer = ckpt.model, ckpt.tokenizer
    if tokenizer is None:
        raise UsageError(f"{checkpoint} has no tokenizer (a nanoGPT ckpt.pt needs its meta.pkl "
                         "beside it; a Hugging Face directory its vocab.json and merges.txt)")
    return model, tokenizer


def load_classifier(checkpoint: str):
    """(classifier, tokenizer) of a --checkpoint that ``lm finetune`` wrote, or of a Hugging
    Face GPT2ForSequenceClassification directory (its tokenizer required)."""
    from decoderkit.interop.checkpoints import CLASSIFIER, LM, load_checkpoint

    ckpt = load_checkpoint(checkpoint, families=(CLASSIFIER,), use={LM: "decoderkit lm finetune"})
    if ckpt.tokenizer is None:
        raise UsageError(f"{checkpoint} has no tokenizer (vocab.json and merges.txt, or "
                         "tokenizer.json)")
    return ckpt.model, ckpt.tokenizer


def add_generation_flags(p, what: str, max_new_tokens: int = 200) -> None:
    """--max-new-tokens, the sampling flags, --greedy, --stop, --threads and --int8: how each
    token of a ``what`` ("sample", "reply") is chosen and where it ends."""
    p.add_argument("--max-new-tokens", type=integer(1, 1_000_000), default=max_new_tokens,
                   help=f"tokens generated per {what}")
    add_sampling_flags(p)
    p.add_argument("--greedy", action="store_true", help="the most likely token each step")
    p.add_argument("--stop", action="append", default=[], metavar="TEXT", type=text,
                   help=f"end a {what} where this text appears, without it (repeatable)")
    add_threads(p)
    p.add_argument("--int8", action="store_true",
                   help="int8 linears with dynamic activation quantization (x86 CPUs; "
                   "tokens may differ slightly from float32)")


def check_generation_flags(args: argparse.Namespace) -> None:
    """--greedy alone (no sampling flag beside it), each --stop a non-empty text."""
    if args.greedy and (args.temperature != 1.0 or args.top_k or args.top_p != 1.0):
        raise UsageError("--greedy takes no --temperature, --top-k or --top-p")
    for stop in args.stop:
        if not stop:
            raise UsageError("--stop must be a non-empty text, got ''")
