"""``decoderkit train``: train on a built-in task or your corpus, checkpoint to --out."""

from __future__ import annotations

import argparse
from pathlib import Path

from decoderkit.base.errors import UsageError
from decoderkit.cli.shape import add_shape_flags
from decoderkit.nn.model import ModelConfig
from decoderkit.training.distributed import DEVICES
from decoderkit.training.fit import DataConfig, TrainConfig, check_fresh, fit, prepare_data
from decoderkit.training.tasks import TASKS


def add(sub) -> None:
    """The subcommand with its data, model, training and output flags."""
    p = sub.add_parser("train", help="train a model on a built-in task or your TSV corpus",
                       description="Train with Adam (0.9, 0.98, 1e-9) under the warm-up schedule, "
                       "validate periodically, checkpoint to --out. Works unchanged under "
                       "torchrun --nproc_per_node=N (DistributedDataParallel).")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--task", help=f"built-in task: {', '.join(TASKS)}")
    src.add_argument("--data", metavar="TSV", help="your corpus: 'source<TAB>target' lines")
    src.add_argument("--src", metavar="FILE", help="your corpus: sources (with --tgt)")
    p.add_argument("--tgt", metavar="FILE", help="targets, line-aligned with --src")
    p.add_argument("--out", metavar="DIR", help="checkpoint directory (default runs/<task|data>)")
    p.add_argument("--resume", action="store_true", help="continue the checkpoint in --out")
    p.add_argument("--overwrite", action="store_true", help="replace a checkpoint in --out")
    m = p.add_argument_group("model")
    add_shape_flags(m, layers=2, d_model=128, heads=4, d_ff=512)
    m.add_argument("--dropout", type=float, default=0.1, help="dropout rate")
    m.add_argument("--max-len", type=int, default=256, help="longest sequence (positions)")
    t = p.add_argument_group("training")
    d = TrainConfig()
    t.add_argument("--batch-size", type=int, default=d.batch_size, help="sentences per batch")
    t.add_argument("--accum", type=int, default=d.accum, help="micro-batches per step")
    t.add_argument("--max-steps", type=int, default=d.max_steps, help="optimiser steps")
    t.add_argument("--time-limit", type=float, help="stop after this many seconds of training")
    t.add_argument("--warmup", type=int, default=d.warmup, help="warm-up steps")
    t.add_argument("--lr-factor", type=float, default=d.lr_factor, help="noam factor")
    t.add_argument("--smoothing", type=float, default=d.smoothing, help="label smoothing eps")
    t.add_argument("--clip", type=float, default=d.clip, help="max gradient norm (0: none)")
    t.add_argument("--valid-every", type=int, default=d.valid_every, help="steps per validation")
    t.add_argument("--patience", type=int, default=d.patience,
                   help="early stop after this many validations without a lower loss (0: never)")
    t.add_argument("--target-exact", type=float, help="stop once exact match reaches this")
    t.add_argument("--seed", type=int, default=d.seed, help="seed of everything")
    t.add_argument("--device", choices=DEVICES, default="auto",
                   help="where to run: auto = CUDA when present, else CPU")
    t.add_argument("--threads", type=int, help="CPU threads for torch (default: torch's choice; "
                   "1 is fastest on a busy machine)")
    t.add_argument("--show", type=int, default=5, help="held-out translations printed at the end")
    t.add_argument("--quiet", action="store_true", help="no progress bar")
    g = p.add_argument_group("data")
    dd = DataConfig()
    g.add_argument("--train-size", type=int, default=dd.train_size, help="task pairs generated")
    g.add_argument("--valid-size", type=int, default=dd.valid_size, help="held-out pairs")
    g.add_argument("--vocab-size", type=int, default=dd.vocab_size, help="BPE vocabulary per side")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Build the data, ModelConfig and TrainConfig from ``args`` and ``fit``; exit status 0."""
    import torch

    from decoderkit.training.checkpoint import load_checkpoint

    if bool(args.src) != bool(args.tgt):
        raise UsageError("--src and --tgt go together")
    out = Path(args.out or Path("runs") / (args.task or Path(args.data or args.src).stem))
    data_cfg = DataConfig(task=args.task, tsv=args.data, src=args.src, tgt=args.tgt,
                          train_size=args.train_size, valid_size=args.valid_size,
                          vocab_size=args.vocab_size, max_tokens=args.max_len - 2, seed=args.seed)
    if args.threads is not None:
        if args.threads < 1:
            raise UsageError(f"--threads must be >= 1, got {args.threads}")
        torch.set_num_threads(args.threads)
    tokenizers = None
    if args.resume:
        ckpt = load_checkpoint(out)
        tokenizers = (ckpt.src_tokenizer, ckpt.tgt_tokenizer)
    else:
        check_fresh(out, args.overwrite)  # before generating data: fail fast
    data = prepare_data(data_cfg, tokenizers)
    config = ModelConfig(src_vocab=data.src_tokenizer.vocab_size,
                         tgt_vocab=data.tgt_tokenizer.vocab_size, n_layers=args.layers,
                         d_model=args.d_model, n_heads=args.heads, d_ff=args.d_ff,
                         dropout=args.dropout, norm_first=args.norm_first, max_len=args.max_len)
    cfg = TrainConfig(batch_size=args.batch_size, accum=args.accum, max_steps=args.max_steps,
                      time_limit=args.time_limit, warmup=args.warmup, lr_factor=args.lr_factor,
                      smoothing=args.smoothing, clip=args.clip or None,
                      valid_every=args.valid_every, patience=args.patience,
                      target_exact=args.target_exact, seed=args.seed)
    fit(config, cfg, data, out, resume=args.resume, overwrite=args.overwrite,
        device=args.device, show=args.show, progress=not args.quiet)
    return 0
