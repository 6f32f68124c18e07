"""What several ``lm`` subcommands share: the --checkpoint help and opening it (an LM, or a
fine-tuned classifier)."""

from __future__ import annotations

from decoderkit.base.errors import UsageError

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
