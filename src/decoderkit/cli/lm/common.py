"""What several ``lm`` subcommands share: the --checkpoint help and opening it (an LM, or a
fine-tuned classifier), and the generation flags of ``lm sample`` and ``lm chat``."""

from __future__ import annotations

import argparse
import sys

from decoderkit.base.errors import UsageError
from decoderkit.cli.args import integer, pathname, text
from decoderkit.cli.engines import add_compile_flags, add_dtype_flag
from decoderkit.cli.shape import add_sampling_flags, add_threads
from decoderkit.generation.lm.defaults import BUILTIN, MODE, SAMPLING
from decoderkit.generation.settings import FLAGS, Source, settle

CHECKPOINT_HELP = ("an LM run directory (lm train), a Hugging Face gpt2/openai-gpt or "
                   "llama/mistral/qwen2/qwen3 directory, or a nanoGPT ckpt.pt")


ADAPTER_HELP = ("a LoRA adapter merged into --checkpoint: an lm tune run, or any PEFT adapter "
                "directory (adapter_config.json; --checkpoint RUN alone opens its base "
                "from there)")


def add_adapter(p) -> None:
    """--adapter DIR: a LoRA adapter on --checkpoint (``interop.checkpoints.load_checkpoint``)."""
    p.add_argument("--adapter", metavar="DIR", type=pathname, help=ADAPTER_HELP)


def load(checkpoint: str, instead: str = "decoderkit translate", adapter: str | None = None):
    """(model, tokenizer) of any LM --checkpoint (``open_lm``)."""
    ckpt = open_lm(checkpoint, instead, adapter)
    return ckpt.model, ckpt.tokenizer


def open_lm(checkpoint: str, instead: str = "decoderkit translate", adapter: str | None = None,
            fmt=None):
    """Any LM --checkpoint as an ``LMCheckpoint`` (its model, tokenizer, end-of-sequence ids
    and generation defaults), a LoRA ``adapter`` merged in; a model without a tokenizer is
    refused, a translation model named with the command to use ``instead`` (``fmt``: its
    format, where the command found it already: ``interop.checkpoints.find_format``)."""
    from decoderkit.base.families import LM, SEQ2SEQ
    from decoderkit.interop.checkpoints import load_checkpoint

    return with_tokenizer(load_checkpoint(checkpoint, families=(LM,), use={SEQ2SEQ: instead},
                                          adapter=adapter, fmt=fmt), checkpoint)


def with_tokenizer(ckpt, checkpoint: str):
    """The loaded LM ``ckpt`` (read from ``checkpoint``); one without a tokenizer is
    refused."""
    if ckpt.tokenizer is None:
        raise UsageError(f"{checkpoint} has no tokenizer (a nanoGPT ckpt.pt needs its meta.pkl "
                         "beside it; a Hugging Face directory its tokenizer.json, or vocab.json "
                         "and merges.txt)")
    return ckpt


def load_classifier(checkpoint: str):
    """(classifier, tokenizer) of a --checkpoint that ``lm finetune`` wrote, or of a Hugging
    Face GPT2ForSequenceClassification directory (its tokenizer required)."""
    from decoderkit.base.families import CLASSIFIER, LM
    from decoderkit.interop.checkpoints import load_checkpoint

    ckpt = load_checkpoint(checkpoint, families=(CLASSIFIER,), use={LM: "decoderkit lm finetune"})
    if ckpt.tokenizer is None:
        raise UsageError(f"{checkpoint} has no tokenizer (vocab.json and merges.txt, or "
                         "tokenizer.json)")
    return ckpt.model, ckpt.tokenizer


def add_generation_flags(p, what: str, max_new_tokens: int = BUILTIN["max_new_tokens"]
                         ) -> None:
    """--max-new-tokens, the sampling flags, --greedy, --stop, --threads and --int8: how each
    token of a ``what`` ("sample", "reply") is chosen and where it ends. A generation flag not
    given is None: the checkpoint's generation_config.json decides, else ``max_new_tokens``
    and the sampling flags' own defaults (``settle_flags``)."""
    p.add_argument("--max-new-tokens", type=integer(1, 1_000_000),
                   help=f"tokens generated per {what} (default: the checkpoint's "
                   f"generation_config.json, else {max_new_tokens})")
    add_sampling_flags(p, model_defaults=True)
    p.add_argument("--greedy", action="store_true", help="the most likely token each step "
                   "(default: the checkpoint's generation_config.json do_sample false)")
    p.add_argument("--stop", action="append", default=[], metavar="TEXT", type=text,
                   help=f"end a {what} where this text appears, without it (repeatable)")
    add_threads(p)
    p.add_argument("--int8", action="store_true",
                   help="int8 linears with dynamic activation quantization (x86 CPUs; "
                   "tokens may differ slightly from float32)")
    add_compile_flags(p)
    add_dtype_flag(p)
    p.set_defaults(builtin_max_new_tokens=max_new_tokens)


def check_generation_flags(args: argparse.Namespace) -> None:
    """--greedy alone (no sampling flag beside it), each --stop a non-empty text."""
    if args.greedy and any(getattr(args, k) is not None for k in SAMPLING):
        raise UsageError("--greedy takes no --temperature, --top-k or --top-p")
    for stop in args.stop:
        if not stop:
            raise UsageError("--stop must be a non-empty text, got ''")


def settle_flags(args: argparse.Namespace, generation, command: str
                        ) -> argparse.Namespace:
    """max_new_tokens, greedy, temperature, top_k, top_p: the flags given, else the
    checkpoint's ``generation`` defaults (each one taken named on stderr, ``command`` first),
    else ours (``generation.settings.settle``)."""
    asked = {k: getattr(args, k) for k in BUILTIN if k != "greedy"} | {
        "greedy": args.greedy or None}
    settled = settle([Source(FLAGS, asked), generation.as_source()],
                     BUILTIN | {"max_new_tokens": args.builtin_max_new_tokens}, MODE)
    if settled.notes:
        print(f"decoderkit {command}: {'; '.join(settled.notes)}", file=sys.stderr)
    return argparse.Namespace(**settled.values)
