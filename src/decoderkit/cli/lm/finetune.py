"""``decoderkit lm finetune``: fine-tune a pretrained LM for classification, GPT-1's recipe."""

from __future__ import annotations

import argparse

from decoderkit.base.checks import check_step_tokens
from decoderkit.cli.lm.common import load
from decoderkit.cli.lm.tune_flags import (
    SHARED_ROWS,
    add_config_flags,
    add_tuning_flags,
    check_inputs,
)
from decoderkit.cli.resume import on_resume
from decoderkit.cli.shape import set_threads
from decoderkit.training.distributed import say
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
    add_tuning_flags(p, base="the pretrained model", data="TSV",
                     examples="the training examples",
                     valid="held-out examples scored at each validation (default: --data "
                     "itself)",
                     resume="the same model and data; only --max-steps, --time-limit, "
                     "--valid-every may change")
    t = p.add_argument_group("training (defaults: GPT-1's)")
    add_config_flags(t, FinetuneConfig(), FINETUNE_RANGES, (
        *SHARED_ROWS,
        (("--warmup",), "warmup", "fraction of the steps of linear warm-up (default "
         "%(default)s)"),
        (("--epochs",), "epochs", "passes over --data (default %(default)s)"),
        (("--max-steps",), "max_steps", "optimiser steps (default: those of --epochs)"),
        (("--valid-every", "--eval-every"), "valid_every",
         "steps per validation (default: one epoch)"),
        (("--lm-coef",), "lm_coef", "lambda: weight of the auxiliary LM loss (default "
         "%(default)s)"),
        (("--clf-dropout",), "clf_dropout", "dropout before the classification head "
         "(default %(default)s)"),
        (("--seed",), "seed", "seed of the new rows, the head, dropout and shuffling")))
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
    check_inputs(args)
    train = read_tsv(args.data)  # bad lines: refused here, naming the line
    valid = read_tsv(args.valid) if args.valid else train
    check_out(args.out, resume=args.resume, overwrite=args.overwrite, files=FILES)
    model, tokenizer = load(args.checkpoint)
    check_step_tokens(args.batch_size, args.accum, model.config.max_len,
                      "--batch-size x --accum x the model's context")  # before any work
    say(f"{len(train.texts):,} training examples ({'pairs' if train.pairs else 'texts'}), "
        f"labels {', '.join(sorted(set(train.labels)))}; validation on "
        + (f"{len(valid.texts):,} examples of {args.valid}" if args.valid
           else "the training data (no --valid)"))
    finetune(model, tokenizer, cfg, train, valid, args.out, resume=args.resume,
             overwrite=args.overwrite, device=args.device, progress=not args.quiet,
             commands=commands)
    return 0
