"""What several ``lm`` subcommands share: the --checkpoint help, opening it, --threads."""

from __future__ import annotations

import argparse

from decoderkit.base.errors import UsageError

CHECKPOINT_HELP = ("an LM run directory (lm train), a Hugging Face gpt2/openai-gpt directory "
                   "or a nanoGPT ckpt.pt")


def set_threads(args: argparse.Namespace) -> None:
    """Apply --threads (torch's CPU threads) when given."""
    if args.threads is not None:
        import torch

        torch.set_num_threads(args.threads)


def load(checkpoint: str):
    """(model, tokenizer) of any --checkpoint; a model without a tokenizer is refused."""
    from decoderkit.interop.pretrained import load_pretrained

    model, tokenizer = load_pretrained(checkpoint)
    if tokenizer is None:
        raise UsageError(f"{checkpoint} has no tokenizer (a nanoGPT ckpt.pt needs its meta.pkl "
                         "beside it; a Hugging Face directory its vocab.json and merges.txt)")
    return model, tokenizer
