"""``decoderkit lm export``: write a model for another library (transformers)."""

from __future__ import annotations

import argparse
from pathlib import Path

from decoderkit.cli.args import pathname
from decoderkit.cli.lm.common import CHECKPOINT_HELP, load_classifier, open_lm


def add(lm) -> None:
    """The ``lm export`` parser: target format, checkpoint, output directory."""
    p = lm.add_parser("export", help="write a model for another library",
                      description="transformers: a directory GPT2LMHeadModel.from_pretrained "
                      "loads with the same logits (gpt2-shaped models; Llama-shaped ones: a "
                      "llama, qwen2 or qwen3 directory AutoModelForCausalLM loads) and "
                      "AutoTokenizer with the same ids and special tokens, with a "
                      "generation_config.json of the end-of-text ids and the sampling defaults "
                      "the model came with; from a fine-tuned classifier (lm finetune), one "
                      "GPT2ForSequenceClassification loads.")
    p.add_argument("--to", required=True, choices=("transformers",), help="target format")
    p.add_argument("--checkpoint", required=True, metavar="DIR", type=pathname,
                   help=CHECKPOINT_HELP + ", or an lm finetune directory")
    p.add_argument("--out", required=True, metavar="DIR", type=pathname,
                   help="the directory to write")
    p.add_argument("--overwrite", action="store_true", help="replace an earlier export in --out")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Export --checkpoint to --out and say what loads it."""
    from decoderkit.interop.checkpoints import CLASSIFIER, family_of
    from decoderkit.interop.gpt.hf import export_transformers
    from decoderkit.interop.llama.hf_export import export_llama, is_llama_shaped

    if family_of(args.checkpoint) == CLASSIFIER:  # ours, or a GPT2ForSequenceClassification
        return _classifier(args)
    ckpt = open_lm(args.checkpoint, instead="decoderkit export")
    llama = is_llama_shaped(ckpt.model.config)
    export = export_llama if llama else export_transformers
    out = export(ckpt.model, ckpt.tokenizer, Path(args.out), overwrite=args.overwrite,
                 generation=ckpt.generation)
    loader = "AutoModelForCausalLM" if llama else "GPT2LMHeadModel"
    print(f"{out}: transformers ({loader}.from_pretrained loads it)")
    return 0


def _classifier(args: argparse.Namespace) -> int:
    """Export a fine-tuned classifier as a GPT2ForSequenceClassification directory."""
    from decoderkit.interop.gpt.classifier import export_classifier

    model, tokenizer = load_classifier(args.checkpoint)
    out = export_classifier(model, tokenizer, Path(args.out), overwrite=args.overwrite)
    print(f"{out}: transformers (GPT2ForSequenceClassification.from_pretrained loads it; it "
          "pools the last token that is not pad_token_id = the start token: give it inputs "
          "built as <s> text <e>)")
    return 0
