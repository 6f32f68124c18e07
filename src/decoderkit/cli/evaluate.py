"""``decoderkit eval``: loss, accuracy, exact match, BLEU and chrF of a checkpoint."""

from __future__ import annotations

import argparse

from decoderkit.base.errors import UsageError
from decoderkit.training.distributed import DEVICES


def add(sub) -> None:
    """The subcommand with its checkpoint, data and device flags."""
    p = sub.add_parser("eval", help="evaluate a checkpoint on held-out pairs",
                       description="Loss, token accuracy, exact match, BLEU and chrF of a "
                       "checkpoint: on its own run's held-out pairs, or on a TSV you give.")
    p.add_argument("--checkpoint", metavar="DIR", required=True, help="checkpoint directory")
    p.add_argument("--data", metavar="TSV", help="score these 'source<TAB>target' pairs instead")
    p.add_argument("--batch-size", type=int, default=128, help="sentences per batch")
    p.add_argument("--device", choices=DEVICES, default="auto",
                   help="where to run: auto = CUDA when present, else CPU")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Score a checkpoint on ``--data`` or its run's held-out pairs, print one line; exit 0."""
    from decoderkit.training import distributed
    from decoderkit.training.checkpoint import load_checkpoint
    from decoderkit.training.data import read_tsv
    from decoderkit.training.evaluation import evaluate
    from decoderkit.training.fit import DataConfig, prepare_data

    ckpt = load_checkpoint(args.checkpoint, distributed.setup(args.device).device)
    if args.data:
        texts = read_tsv(args.data)
    else:
        if "data" not in ckpt.meta:
            raise UsageError(f"{args.checkpoint} records no training data; pass --data")
        texts = prepare_data(DataConfig(**ckpt.meta["data"]),
                             (ckpt.src_tokenizer, ckpt.tgt_tokenizer)).valid_texts
    pairs = [(ckpt.src_tokenizer.encode(s), ckpt.tgt_tokenizer.encode(t)) for s, t in texts]
    metrics, _ = evaluate(ckpt.model, pairs, [t for _, t in texts], ckpt.tgt_tokenizer,
                          batch_size=args.batch_size)
    print(f"{len(pairs)} pairs | {metrics.line()}")
    return 0
