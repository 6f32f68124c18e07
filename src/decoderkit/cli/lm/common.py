"""What several ``lm`` subcommands share: the --checkpoint help and opening it (an LM, or a
fine-tuned classifier)."""

from __future__ import annotations

from decoderkit.base.errors import UsageError

CHECKPOINT_HELP = ("an LM run directory (lm train), a Hugging Face gpt2/openai-gpt directory "
                   "or a nanoGPT ckpt.pt")


def load(checkpoint: str):
    """(model, tokenizer) of any --checkpoint; a model without a tokenizer, or a fine-tuned
    classifier (whose commands are lm classify and lm eval --data), is refused."""
    from decoderkit.interop.pretrained import load_pretrained
    from decoderkit.training.lm.classifier_checkpoint import is_classifier_checkpoint

    if is_classifier_checkpoint(checkpoint):
        raise UsageError(f"{checkpoint} is a fine-tuned classifier (lm finetune), not a "
                         "language model: use lm classify, lm eval --data or lm export")

    model, tokenizer = load_pretrained(checkpoint)
    if tokenizer is None:
        raise UsageError(f"{checkpoint} has no tokenizer (a nanoGPT ckpt.pt needs its meta.pkl "
                         "beside it; a Hugging Face directory its vocab.json and merges.txt)")
    return model, tokenizer


def load_classifier(checkpoint: str):
    """(classifier, tokenizer) of a --checkpoint that ``lm finetune`` wrote, or of a Hugging
    Face GPT2ForSequenceClassification directory (its tokenizer required)."""
    from decoderkit.interop.hf_gpt_classifier import is_hf_classifier, load_hf_classifier
    from decoderkit.training.lm.classifier_checkpoint import open_classifier_checkpoint

    if is_hf_classifier(checkpoint):
        model, tokenizer = load_hf_classifier(checkpoint)
        if tokenizer is None:
            raise UsageError(f"{checkpoint} has no tokenizer (vocab.json and merges.txt, or "
                             "tokenizer.json)")
        return model, tokenizer
    ckpt = open_classifier_checkpoint(checkpoint)
    return ckpt.model, ckpt.tokenizer
