"""``decoderkit lm export``: write a model for another library (transformers, llama.cpp)."""

from __future__ import annotations

import argparse
from pathlib import Path

from decoderkit.cli.args import pathname
from decoderkit.base.errors import UsageError
from decoderkit.cli.lm.common import CHECKPOINT_HELP, add_adapter, load_classifier, open_lm
from decoderkit.interop.lm.architectures import GGUF_TYPES


def add(lm) -> None:
    """The ``lm export`` parser: target format, checkpoint, output directory."""
    p = lm.add_parser("export", help="write a model for another library",
                      description="transformers: a directory GPT2LMHeadModel.from_pretrained "
                      "loads with the same logits (gpt2-shaped models; Llama-shaped ones: a "
                      "llama, qwen2 or qwen3 directory AutoModelForCausalLM loads) and "
                      "AutoTokenizer with the same ids and special tokens, with a "
                      "generation_config.json of the end-of-text ids and the sampling defaults "
                      "the model came with; from a fine-tuned classifier (lm finetune), one "
                      "GPT2ForSequenceClassification loads. gguf: DIR/model.gguf for llama.cpp "
                      "(its llama, qwen2, qwen3 or gpt2 architecture), the tokenizer, every "
                      "end-of-text id and the checkpoint's chat template inside.")
    p.add_argument("--to", required=True, choices=("transformers", "gguf"),
                   help="target format")
    p.add_argument("--type", choices=GGUF_TYPES, default=None,
                   help="--to gguf: the matrices' type (norms and biases stay float32; "
                   "default float32)")
    p.add_argument("--checkpoint", required=True, metavar="DIR", type=pathname,
                   help=CHECKPOINT_HELP + ", or an lm finetune directory")
    add_adapter(p)
    p.add_argument("--out", required=True, metavar="DIR", type=pathname,
                   help="the directory to write")
    p.add_argument("--merge", action="store_true",
                   help="with an adapter (--adapter, or --checkpoint an adapter): write the "
                   "model with it merged in (W + s B A); without --merge, --to gguf writes the "
                   "adapter alone as llama.cpp's LoRA GGUF (llama-cli --lora)")
    p.add_argument("--overwrite", action="store_true", help="replace an earlier export in --out")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Export --checkpoint to --out and say what loads it."""
    from decoderkit.base.families import CLASSIFIER, LM, SEQ2SEQ
    from decoderkit.interop.checkpoints import find_format
    from decoderkit.interop.gpt.hf import export_transformers
    from decoderkit.interop.llama.hf_export import export_llama
    from decoderkit.interop.lm.architectures import LLAMA, architecture_of

    if args.type is not None and args.to != "gguf":
        raise UsageError(f"--type is for --to gguf, got --to {args.to}")
    fmt = find_format(args.checkpoint, families=(LM, CLASSIFIER),  # the one detection
                      use={SEQ2SEQ: "decoderkit export"})
    if fmt.family == CLASSIFIER:  # ours, or a GPT2ForSequenceClassification
        if args.to == "gguf":
            raise UsageError(f"--to gguf writes a language model; --checkpoint "
                             f"{args.checkpoint} is a classifier (use --to transformers)")
        return _classifier(args)
    adapter = adapter_of(args, fmt)
    if adapter is not None and not args.merge:
        return _lora_gguf(args, adapter)
    ckpt = open_lm(args.checkpoint, instead="decoderkit export", adapter=args.adapter, fmt=fmt)
    if args.to == "gguf":
        return _gguf(args, ckpt)
    row = architecture_of(ckpt.model.config)
    export = export_llama if row.block == LLAMA else export_transformers
    template = ckpt.chat
    out = export(ckpt.model, ckpt.tokenizer, Path(args.out), overwrite=args.overwrite,
                 generation=ckpt.generation,
                 chat_template=None if template is None else template.source)
    kept = "" if template is None else ", its chat template in chat_template.jinja"
    print(f"{out}: transformers ({row.loader}.from_pretrained loads it{kept})")
    return 0


def adapter_of(args: argparse.Namespace, fmt) -> str | None:
    """The adapter to export (--adapter, or --checkpoint an adapter directory: its format
    ``fmt`` is PEFT's), or None; --merge without one is refused, as is one without --merge
    --to transformers."""
    from decoderkit.interop.lm.peft import is_adapter

    adapter = args.adapter or (args.checkpoint if fmt.detect is is_adapter else None)
    if args.merge and adapter is None:
        raise UsageError("--merge merges a LoRA adapter: give --adapter DIR (or --checkpoint "
                         "an adapter directory)")
    if adapter is not None and not args.merge and args.to == "transformers":
        raise UsageError("--to transformers with an adapter: give --merge to write the merged "
                         "model (the adapter is already PEFT's format, which peft and vLLM "
                         "read as it is)")
    return adapter


def _lora_gguf(args: argparse.Namespace, adapter: str) -> int:
    """The adapter alone as llama.cpp's LoRA GGUF (``interop.gguf.lora``)."""
    from decoderkit.interop.gguf.lora import FILE, export_lora_gguf
    from decoderkit.interop.lm.peft import adapter_base, load_adapter, read_adapter

    if args.type not in (None, "float32"):
        raise UsageError(f"--type {args.type}: a LoRA GGUF is written float32")
    base = args.checkpoint if args.adapter else str(adapter_base(args.checkpoint))
    ckpt = open_lm(base, instead="decoderkit export")
    if read_adapter(adapter).tokens:
        raise UsageError(f"--adapter {adapter} trains new tokens (trainable_token_indices), "
                         "which llama.cpp's LoRA GGUF cannot hold: export it --merge")
    lora = load_adapter(adapter, ckpt.model)
    out = export_lora_gguf(ckpt.model, lora, Path(args.out), overwrite=args.overwrite)
    print(f"{out}: llama.cpp's LoRA adapter of {base} (llama-cli -m BASE.gguf --lora "
          f"{out / FILE}; llama-cpp-python: Llama(model_path=..., lora_path='{out / FILE}'))")
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


def _gguf(args: argparse.Namespace, ckpt) -> int:
    """Export an LM as DIR/model.gguf with the checkpoint directory's chat template."""
    from decoderkit.interop.gguf.export import export_gguf
    from decoderkit.interop.gguf.writer import FILE
    template = ckpt.chat
    out = export_gguf(ckpt.model, ckpt.tokenizer, Path(args.out),
                      kind=args.type or "float32", overwrite=args.overwrite,
                      chat_template=None if template is None else template.source,
                      generation=ckpt.generation)
    print(f"{out}: llama.cpp (llama-cli -m {out / FILE}; llama-cpp-python: "
          f"Llama(model_path='{out / FILE}'))")
    return 0
