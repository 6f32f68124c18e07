"""``decoderkit lm finetune``: fine-tune a pretrained LM for classification, GPT-1's recipe."""

from __future__ import annotations

import argparse
import sys

from decoderkit.base.checks import check_step_tokens
from decoderkit.base.files import check_input_file
from decoderkit.cli.args import pathname, ranged
from decoderkit.cli.lm.common import CHECKPOINT_HELP, load
from decoderkit.cli.resume import on_resume
from decoderkit.cli.shape import add_run_flags, set_threads
from decoderkit.training.lm.finetune import FINETUNE_RANGES, FinetuneConfig


def add(lm) -> None:
    """The ``lm finetune`` parser: pretrained model, TSV data, run directory, GPT-1's flags."""
    p = lm.add_parser("finetune", help="fine-tune a pretrained LM to classify text (GPT-1)",
                      description="GPT-1's fine-tuning: start, delimiter and extract tokens "
                      "added to the vocabulary (new embedding rows), a linear head on the "
                      "final state at the extract token, loss = task loss + --lm-coef x LM "
                      "loss; AdamW, linear warm-up then linear decay. The defaults are the "
                      "paper's. TSV lines: text TAB label, or text TAB text TAB label. --out "
                      "holds the last state. Works unchanged under torchrun --nproc_per_node=N.")
    p.add_argument("--checkpoint", required=True, metavar="DIR", type=pathname,
                   help=f"the pretrained model: {CHECKPOINT_HELP}")
    p.add_argument("--data", required=True, metavar="TSV", type=pathname,
                   help="the training examples")
    p.add_argument("--valid", metavar="TSV", type=pathname,
                   help="held-out examples scored at each validation (default: --data itself)")
    p.add_argument("--out", required=True, metavar="DIR", type=pathname, help="the run directory")
    p.add_argument("--resume", action="store_true",
                   help="continue the run in --out (the same model and data; a flag left out is "
                   "the run's own; only --max-steps, --time-limit, --valid-every may change)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace the run in --out (a directory of other files is refused)")
    t = p.add_argument_group("training (defaults: GPT-1's)")
    d, r = FinetuneConfig(), FINETUNE_RANGES
    for flags, name, text in (
            (("--lr",), "lr", "peak learning rate (default %(default)s)"),
            (("--warmup",), "warmup", "fraction of the steps of linear warm-up (default "
             "%(default)s)"),
            (("--batch-size",), "batch_size", "examples per micro-batch (default %(default)s)"),
            (("--accum",), "accum", "micro-batches per step"),
            (("--epochs",), "epochs", "passes over --data (default %(default)s)"),
            (("--max-steps",), "max_steps", "optimiser steps (default: those of --epochs)"),
            (("--valid-every", "--eval-every"), "valid_every",
             "steps per validation (default: one epoch)"),
            (("--lm-coef",), "lm_coef", "lambda: weight of the auxiliary LM loss (default "
             "%(default)s)"),
            (("--clf-dropout",), "clf_dropout", "dropout before the classification head "
             "(default %(default)s)"),
            (("--weight-decay",), "weight_decay", "AdamW decay on matrices (default "
             "%(default)s)"),
            (("--seed",), "seed", "seed of the new rows, the head, dropout and shuffling")):
        t.add_argument(*flags, dest=name, type=ranged(r[name]), default=getattr(d, name),
                       help=text)
    add_run_flags(t, d, r)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Read the data, open the pretrained model and ``finetune``."""
    from decoderkit.training.lm.classifier_checkpoint import FILES
    from decoderkit.training.lm.finetune import finetune
    from decoderkit.training.lm.labelled import read_tsv
    from decoderkit.training.rundir import check_out

    args, commands = on_resume(args, args.out, "decoderkit lm finetune")  # flags left out: its own
    set_threads(args)
    cfg = FinetuneConfig(lr=args.lr, warmup=args.warmup, batch_size=args.batch_size,
                         accum=args.accum, epochs=args.epochs, max_steps=args.max_steps,
                         lm_coef=args.lm_coef, clf_dropout=args.clf_dropout,
                         weight_decay=args.weight_decay, clip=args.clip or None,
                         valid_every=args.valid_every, time_limit=args.time_limit,
                         seed=args.seed)
    for flag, file in (("--data", args.data), ("--valid", args.valid)):
        if file is not None:
            check_input_file(file, flag)
    train = read_tsv(args.data)  # bad lines: refused here, naming the line
    valid = read_tsv(args.valid) if args.valid else train
    check_out(args.out, resume=args.resume, overwrite=args.overwrite, files=FILES)
    model, tokenizer = load(args.checkpoint)
    check_step_tokens(args.batch_size, args.accum, model.config.max_len,
                      "--batch-size x --accum x the model's context")  # before any work
    print(f"{len(train.texts):,} training examples ({'pairs' if train.pairs else 'texts'}), "
          f"labels {', '.join(sorted(set(train.labels)))}; validation on "
          + (f"{len(valid.texts):,} examples of {args.valid}" if args.valid
             else "the training data (no --valid)"), file=sys.stderr)
    finetune(model, tokenizer, cfg, train, valid, args.out, resume=args.resume,
             overwrite=args.overwrite, device=args.device, progress=not args.quiet,
             commands=commands)
    return 0
