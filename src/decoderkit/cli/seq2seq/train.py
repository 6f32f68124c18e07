"""``decoderkit train``: train on a built-in task or your corpus, checkpoint to --out."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from decoderkit.base.checks import FRACTION, size
from decoderkit.base.errors import UsageError
from decoderkit.cli.args import pathname, ranged, text
from decoderkit.cli.shape import (
    add_loop_flags,
    add_max_len,
    add_norm_first,
    add_shape_flags,
    add_tie_generator,
    check_step,
    warmup,
    set_threads,
)
from decoderkit.nn.seq2seq.model import ModelConfig
from decoderkit.training.distributed import say
from decoderkit.training.rundir import check_out
from decoderkit.training.seq2seq.checkpoint import FILES
from decoderkit.training.seq2seq.fit import TRAIN_RANGES, TrainConfig, first_data, fit
from decoderkit.training.seq2seq.prepare import (
    DATA_RANGES,
    JOINT,
    TOKENIZERS,
    DataConfig,
    check_inputs,
    prepare_data,
)
from decoderkit.training.seq2seq.tasks import TASKS


def add(sub) -> None:
    """The subcommand with its data, model, training and output flags."""
    p = sub.add_parser("train", help="train a model on a built-in task or your TSV corpus",
                       description="Train with Adam (0.9, 0.98, 1e-9) under the warm-up schedule, "
                       "validate periodically, checkpoint to --out. Works unchanged under "
                       "torchrun --nproc_per_node=N (DistributedDataParallel).")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--task", type=text, help=f"built-in task: {', '.join(TASKS)}")
    src.add_argument("--data", metavar="TSV", type=pathname,
                     help="your corpus: 'source<TAB>target' lines")
    src.add_argument("--src", metavar="FILE", type=pathname,
                     help="your corpus: sources (with --tgt)")
    p.add_argument("--tgt", metavar="FILE", type=pathname, help="targets, line-aligned with --src")
    p.add_argument("--out", metavar="DIR", type=pathname,
                   help="checkpoint directory (default runs/<task|data>)")
    p.add_argument("--resume", action="store_true",
                   help="continue the checkpoint in --out (a flag left out is the run's own; only "
                   "--max-steps, --time-limit, --valid-every, --patience, --target-exact may "
                   "change); a "
                   "checkpoint from decoderkit convert is fine-tuned on the data given, with "
                   "its own model (the model flags are then ignored)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace the checkpoint in --out (a directory holding other files is "
                   "refused, naming them, with or without this flag)")
    p.add_argument("--allow-changed-data", action="store_true",
                   help="with --resume: go on (with a warning) although the corpus changed "
                   "since the checkpoint was trained; refused otherwise")
    m = p.add_argument_group("model")
    add_shape_flags(m, layers=2, d_model=128, heads=4, d_ff=512,
                    layers_help="N: encoder layers and decoder layers (each)")
    add_norm_first(m)
    add_tie_generator(m)
    m.add_argument("--tie-embeddings", action="store_true",
                   help="source embedding = target embedding (one vocabulary: needs "
                   "--tokenizer spm-joint)")
    _add_dropout_flags(m)
    add_max_len(m, dest="max_len", default=256, low=3,
                text="corpus pairs with a side longer than this minus 2 tokens are dropped "
                "(and counted)")
    t = p.add_argument_group("training")
    d, r = TrainConfig(), TRAIN_RANGES
    add_loop_flags(t, d, r, batch_help="sentence pairs per micro-batch")
    t.add_argument("--lr-factor", type=ranged(r["lr_factor"]), default=d.lr_factor,
                   help="noam factor")
    t.add_argument("--smoothing", type=ranged(r["smoothing"]), default=d.smoothing,
                   help="label smoothing eps (0: none)")
    t.add_argument("--ema", type=ranged(r["ema"]), metavar="DECAY",
                   help="validate and checkpoint an exponential moving average of the weights "
                   "with this decay, e.g. 0.999 (default: the weights themselves)")
    t.add_argument("--target-exact", type=ranged(r["target_exact"]),
                   help="stop once held-out exact match reaches this fraction (default: never)")
    t.add_argument("--show", type=ranged(size(0)), default=5,
                   help="held-out translations printed at the end (0: none)")
    _add_data_flags(p.add_argument_group("data"))
    p.set_defaults(run=run)


def _add_dropout_flags(g) -> None:
    """--dropout, --attention-dropout, --ffn-dropout (ModelConfig's three rates)."""
    g.add_argument("--dropout", type=ranged(FRACTION), default=0.1,
                   help="dropout rate (0: none) of embeddings and sublayer outputs, and by "
                   "default of attention weights and the FFN activation")
    g.add_argument("--attention-dropout", type=ranged(FRACTION),
                   help="dropout rate of the attention weights (default: --dropout's; Marian's "
                   "default is 0)")
    g.add_argument("--ffn-dropout", type=ranged(FRACTION),
                   help="dropout rate after the FFN activation (default: --dropout's; "
                   "Marian's default is 0)")


def _add_data_flags(g) -> None:
    """--train-size, --valid-size, --vocab-size, --tokenizer (DataConfig's fields)."""
    dd, dr = DataConfig(), DATA_RANGES
    g.add_argument("--train-size", type=ranged(dr["train_size"]), default=dd.train_size,
                   help="task pairs generated")
    g.add_argument("--valid-size", type=ranged(dr["valid_size"]), default=dd.valid_size,
                   help="held-out pairs (a corpus: at most a tenth of it)")
    g.add_argument("--vocab-size", type=ranged(dr["vocab_size"]), default=dd.vocab_size,
                   help="vocabulary size per side (spm-joint: of the one vocabulary)")
    g.add_argument("--tokenizer", choices=tuple(TOKENIZERS), default=dd.tokenizer,
                   help="how a corpus's vocabularies are learned (from its training split): "
                   + "; ".join(f"{k}: {v}" for k, v in TOKENIZERS.items()))


def run(args: argparse.Namespace) -> int:
    """Build the data, ModelConfig and TrainConfig from ``args`` and ``fit``; exit status 0."""
    from decoderkit.cli.resume import on_resume
    from decoderkit.training.resume import check_settings
    from decoderkit.training.seq2seq.checkpoint import load_checkpoint
    from decoderkit.training.seq2seq.fit import MAY_CHANGE

    out = args.out if args.out is not None else \
        Path("runs") / (args.task or Path(args.data or args.src).stem)
    args, commands = on_resume(args, out, "decoderkit train")  # a flag left out: its own
    if bool(args.src) != bool(args.tgt):
        raise UsageError("--src and --tgt go together")
    if args.allow_changed_data and not args.resume:
        raise UsageError("--allow-changed-data applies to --resume")
    check_step(args, args.max_len)
    cfg = _train_config(args)
    if args.tie_embeddings and (args.task or args.tokenizer not in JOINT):
        given = f"--task {args.task}" if args.task else f"--tokenizer {args.tokenizer}"
        raise UsageError("--tie-embeddings needs one vocabulary for both sides: --tokenizer "
                         f"{' or '.join(JOINT)} on a corpus, got {given}")
    data_cfg = DataConfig(task=args.task, tsv=args.data, src=args.src, tgt=args.tgt,
                          train_size=args.train_size, valid_size=args.valid_size,
                          vocab_size=args.vocab_size, tokenizer=args.tokenizer,
                          max_tokens=args.max_len - 2, seed=args.seed)
    shape = ModelConfig(src_vocab=3, tgt_vocab=3, n_layers=args.layers, d_model=args.d_model,
                        n_heads=args.heads, d_ff=args.d_ff, dropout=args.dropout,
                        attention_dropout=args.attention_dropout, ffn_dropout=args.ffn_dropout,
                        norm_first=args.norm_first, tie_generator=args.tie_generator,
                        tie_embeddings=args.tie_embeddings, max_len=args.max_len)  # checked first;
    set_threads(args)  # the vocabularies (3: room for pad, bos, eos) come with the data
    check_inputs(data_cfg)
    check_out(out, resume=args.resume, overwrite=args.overwrite, files=FILES)  # before any work
    tokenizers, converted = None, None
    if args.resume:
        ckpt = load_checkpoint(out)
        tokenizers = (ckpt.src_tokenizer, ckpt.tgt_tokenizer)
        check_settings(cfg, ckpt.meta.get("train", {}), out, MAY_CHANGE)  # before any work
        if first_data(ckpt.meta) or ckpt.meta.get("origin"):  # converted (decoderkit
            converted = ckpt.config  # convert) and its runs: fine-tune its own model
            data_cfg = dataclasses.replace(data_cfg, max_tokens=converted.max_len - 2)
    data = prepare_data(data_cfg, tokenizers)
    if any(data.dropped):
        say(f"note: dropped {data.dropped[0]} training and {data.dropped[1]} held-out pairs "
            f"with an empty source or a side longer than --max-len {args.max_len} allows "
            f"({data_cfg.max_tokens} tokens)")
    config = converted or dataclasses.replace(shape, src_vocab=data.src_tokenizer.vocab_size,
                                              tgt_vocab=data.tgt_tokenizer.vocab_size)
    fit(config, cfg, data, out, resume=args.resume, overwrite=args.overwrite,
        device=args.device, show=args.show, progress=not args.quiet,
        allow_changed_data=args.allow_changed_data, commands=commands)
    return 0


def _train_config(args: argparse.Namespace) -> TrainConfig:
    """The TrainConfig of the flags (--warmup checked against --max-steps)."""
    return TrainConfig(batch_size=args.batch_size, accum=args.accum, max_steps=args.max_steps,
                       time_limit=args.time_limit, warmup=warmup(args, TrainConfig()),
                       lr_factor=args.lr_factor, smoothing=args.smoothing,
                       clip=args.clip or None, valid_every=args.valid_every,
                       patience=args.patience, target_exact=args.target_exact, seed=args.seed,
                       ema=args.ema)
