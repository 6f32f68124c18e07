"""``decoderkit eval``: loss, accuracy, exact match, BLEU and chrF of a checkpoint."""

from __future__ import annotations

import argparse

from decoderkit.base.checks import size
from decoderkit.cli.args import pathname, ranged
from decoderkit.cli.shape import add_device
from decoderkit.cli.engines import add_engine_flags, open_engine


def add(sub) -> None:
    """The subcommand with its checkpoint, data and device flags."""
    p = sub.add_parser("eval", help="evaluate a checkpoint on held-out pairs",
                       description="Loss, token accuracy, exact match, BLEU and chrF of a "
                       "checkpoint: on its own run's held-out pairs, or on a TSV you give.")
    p.add_argument("--checkpoint", metavar="DIR", type=pathname, help="checkpoint directory")
    p.add_argument("--data", metavar="TSV", type=pathname,
                   help="score these 'source<TAB>target' pairs instead")
    p.add_argument("--batch-size", type=ranged(size()), default=128, help="sentences per batch")
    p.add_argument("--allow-changed-data", action="store_true",
                   help="score the run's held-out pairs (with a warning) although its corpus "
                   "changed since training; refused otherwise")
    add_device(p)
    add_engine_flags(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Score a checkpoint on ``--data`` or its run's held-out pairs, print one line; exit 0."""
    from decoderkit.training import distributed
    from decoderkit.base.families import CLASSIFIER, LM, SEQ2SEQ
    from decoderkit.interop.checkpoints import load_checkpoint
    from decoderkit.training.seq2seq.data import read_tsv
    from decoderkit.generation.seq2seq.int8 import quantize_int8
    from decoderkit.generation.seq2seq.translate import DecodeOptions
    from decoderkit.training.seq2seq.evaluation import evaluate, text_scores
    from decoderkit.training.seq2seq.prepare import check_corpus, prepare_data, recorded_data

    export = open_engine(args)
    if export is None:
        ckpt = load_checkpoint(args.checkpoint, distributed.setup(args.device).device,
                               families=(SEQ2SEQ,), use={LM: "decoderkit lm eval",
                                                             CLASSIFIER: "decoderkit lm eval"})
        model, meta, where = ckpt.model, ckpt.meta, ckpt.path
    else:
        ckpt, meta, where = export, export.manifest, args.model
    if args.data:
        texts = read_tsv(args.data)
    else:
        data_cfg = recorded_data(meta, where)
        check_corpus(data_cfg, meta, where, args.allow_changed_data)
        texts = prepare_data(data_cfg, (ckpt.src_tokenizer, ckpt.tgt_tokenizer)).valid_texts
    pairs = [(ckpt.src_tokenizer.encode(s), ckpt.tgt_tokenizer.encode(t)) for s, t in texts]
    references = [t for _, t in texts]
    if export is not None:  # an engine's greedy translations: no teacher-forced loss
        results = export.translate_lines([s for s, _ in texts], DecodeOptions(),
                                         args.batch_size)
        exact, bleu, chrf = text_scores([r.text for r in results], references)
        compute = " int8" if args.int8 else ""  # CTranslate2 computes in int8 on load
        print(f"{len(pairs)} pairs | {args.engine}, {export.manifest['weights']} weights"
              f"{compute} | exact {100 * exact:.2f}% | "
              f"BLEU {bleu:.1f} | chrF {chrf:.1f}")
        return 0
    if args.int8:
        model = quantize_int8(model)
    metrics, _ = evaluate(model, pairs, references, ckpt.tgt_tokenizer,
                          batch_size=args.batch_size)
    print(f"{len(pairs)} pairs | {'decoderkit int8 | ' if args.int8 else ''}{metrics.line()}")
    return 0
