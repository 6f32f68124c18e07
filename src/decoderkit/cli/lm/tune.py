"""``decoderkit lm tune``: teach a pretrained LM a task on its own examples, by LoRA (a PEFT
adapter) or with ``--full`` every weight."""

from __future__ import annotations

import argparse
import sys

from decoderkit.base.checks import FRACTION, POSITIVE
from decoderkit.base.errors import UsageError
from decoderkit.base.files import check_input_file
from decoderkit.cli.args import pathname, ranged, text
from decoderkit.cli.lm.common import CHECKPOINT_HELP, open_lm
from decoderkit.cli.resume import on_resume
from decoderkit.cli.shape import add_run_flags, set_threads
from decoderkit.nn.lm.lora import check_lora
from decoderkit.nn.lora import ALL_LINEAR, RANK, LoRAConfig
from decoderkit.training.lm.tune import TUNE_RANGES, TuneConfig
from decoderkit.training.lm.tune_data import LOSSES

COMMAND = "decoderkit lm tune"


def add(lm) -> None:
    """The ``lm tune`` parser: base, data, run directory, LoRA's and the loop's flags."""
    p = lm.add_parser("tune", help="tune a pretrained LM on your examples (LoRA, or --full)",
                      description="Tune a pretrained LM on chat JSONL ({\"messages\": [...]} a "
                      "line, rendered by the model's own chat template; the loss on the "
                      "assistant's tokens by default), prompt/completion JSONL (the loss on "
                      "the completion) or plain text. LoRA by default: --out is a PEFT adapter "
                      "(adapter_config.json, adapter_model.safetensors) that peft, vLLM and "
                      "decoderkit's --adapter read; --full trains every weight into an lm "
                      "train run directory. --out holds the best validated state.")
    p.add_argument("--checkpoint", required=True, metavar="DIR", type=pathname,
                   help=f"the base model: {CHECKPOINT_HELP}")
    p.add_argument("--data", required=True, metavar="FILE", type=pathname,
                   help="the examples (.jsonl chat or prompt/completion, or text)")
    p.add_argument("--valid", metavar="FILE", type=pathname,
                   help="held-out examples (default: every tenth of --data)")
    p.add_argument("--out", required=True, metavar="DIR", type=pathname, help="the run directory")
    p.add_argument("--resume", action="store_true",
                   help="continue the run in --out (the same base, data and adapter; a flag "
                   "left out is the run's own)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace the run in --out (a directory of other files is refused)")
    p.add_argument("--loss", choices=LOSSES, default="assistant",
                   help="chat: the tokens that carry the loss: the assistant's turns "
                   "(default), all, or the last assistant turn")
    a = p.add_argument_group("LoRA (defaults: litgpt's r 8, alpha 16)")
    d = LoRAConfig()
    a.add_argument("--rank", type=ranged(RANK), default=d.r, help="r (default %(default)s)")
    a.add_argument("--alpha", type=ranged(POSITIVE), default=d.alpha,
                   help="the update's scale is alpha / r (default %(default)s)")
    a.add_argument("--dropout", type=ranged(FRACTION), default=0.05,
                   help="dropout on the adapters' input (default %(default)s)")
    a.add_argument("--targets", type=text, metavar="NAMES",
                   help=f"comma-separated Hugging Face module names (q_proj,v_proj; c_attn) "
                   f"or {ALL_LINEAR} (default: PEFT's for the architecture)")
    a.add_argument("--rslora", action="store_true", help="scale alpha / sqrt(r) (rsLoRA)")
    a.add_argument("--full", action="store_true",
                   help="no adapter: train every weight (the LoRA flags then stay unused)")
    t = p.add_argument_group("training")
    c, r = TuneConfig(), TUNE_RANGES
    for flags, name, words in (
            (("--lr",), "lr", "peak learning rate (default %(default)s)"),
            (("--min-lr",), "min_lr", "final rate of the cosine decay (default %(default)s)"),
            (("--warmup",), "warmup", "linear warm-up steps (default %(default)s)"),
            (("--batch-size",), "batch_size", "examples per micro-batch (default %(default)s)"),
            (("--accum",), "accum", "micro-batches per step"),
            (("--max-steps",), "max_steps", "optimiser steps (default %(default)s)"),
            (("--valid-every",), "valid_every", "steps per validation (default %(default)s)"),
            (("--patience",), "patience", "validations without a lower loss before stopping "
             "(0: never)"),
            (("--weight-decay",), "weight_decay", "AdamW decay on matrices (default "
             "%(default)s)"),
            (("--seed",), "seed", "the adapters' initialisation, dropout and batch order")):
        t.add_argument(*flags, dest=name, type=ranged(r[name]), default=getattr(c, name),
                       help=words)
    add_run_flags(t, c, r)
    p.set_defaults(run=run)


def lora_config(args: argparse.Namespace) -> LoRAConfig | None:
    """The adapter the flags ask for (None: --full)."""
    if args.full:
        return None
    targets = None if args.targets is None else tuple(
        t.strip() for t in args.targets.split(","))
    if targets is not None and not all(targets):
        raise UsageError(f"--targets: an empty name in {args.targets!r}")
    return LoRAConfig(r=args.rank, alpha=args.alpha, dropout=args.dropout, targets=targets,
                      rslora=args.rslora)


def run(args: argparse.Namespace) -> int:
    """Open the base through the opener, read the examples, ``tune``."""
    from decoderkit.interop.lm.tune_run import (ADAPTER_RUN_FILES, tune, tune_data,
                                                with_end_of_text)
    from decoderkit.text.lm.tokenizer import END_OF_TEXT
    from decoderkit.training.lm.checkpoint import FILES
    from decoderkit.training.rundir import check_out

    args, commands = on_resume(args, args.out, "decoderkit lm train" if args.full else COMMAND)
    set_threads(args)
    cfg = TuneConfig(batch_size=args.batch_size, accum=args.accum, max_steps=args.max_steps,
                     time_limit=args.time_limit, lr=args.lr, min_lr=args.min_lr,
                     warmup=args.warmup, weight_decay=args.weight_decay,
                     clip=args.clip or None, valid_every=args.valid_every,
                     patience=args.patience, loss=args.loss, seed=args.seed)
    lora = lora_config(args)
    for flag, file in (("--data", args.data), ("--valid", args.valid)):
        if file is not None:
            check_input_file(file, flag)
    check_out(args.out, resume=args.resume, overwrite=args.overwrite,
              files=FILES if lora is None else ADAPTER_RUN_FILES)
    base, new_tokens = with_end_of_text(open_lm(args.checkpoint, "decoderkit train"))
    if lora is not None:
        check_lora(base.config, lora)  # before the data is read
    if new_tokens:
        print(f"the base has no end-of-text token: {END_OF_TEXT} added as id {new_tokens[0]} "
              "(trained, and saved with the run's tokenizer)", file=sys.stderr)
    data = tune_data(base, base.chat, args.data, args.valid, cfg.loss)
    print(f"{len(data.train):,} training examples ({data.kind}), {len(data.valid):,} held out; "
          f"{'every weight' if lora is None else f'LoRA r={lora.r} alpha={lora.alpha:g}'}",
          file=sys.stderr)
    tune(base, data, cfg, lora, args.out, resume=args.resume, overwrite=args.overwrite,
         device=args.device, progress=not args.quiet, commands=commands, new_tokens=new_tokens)
    return 0
