"""``decoderkit lm train``: train a language model on text files into a run directory."""

from __future__ import annotations

import argparse
import dataclasses

from decoderkit.base.checks import FRACTION
from decoderkit.base.errors import UsageError
from decoderkit.base.files import check_input_file
from decoderkit.cli.args import pathname, ranged
from decoderkit.cli.shape import (
    add_loop_flags,
    add_max_len,
    add_shape_flags,
    check_step,
    warmup,
    set_threads,
)
from decoderkit.training.distributed import say
from decoderkit.training.lm.fit import LM_TRAIN_RANGES, LMTrainConfig
from decoderkit.text.lm.tokenizer import VOCAB_RANGE

CPU_SHAPE = dict(n_layers=4, d_model=128, n_heads=4)  # with no --preset: nanoGPT's CPU recipe
DEFAULT_PRESET = "nanogpt"  # its architecture (exact-erf GELU, pre-norm, tied head)
BPE_VOCAB = 2048  # --vocab-size's default with --tokenizer bpe


def add(lm) -> None:
    """The ``lm train`` parser: text, run directory, model and training flags."""
    p = lm.add_parser("train", help="train a language model on text files",
                      description="Train on text files (UTF-8; the last 10% of each is held "
                      "out) with AdamW (decay on matrices only), warm-up then cosine decay and "
                      "clipping; validate every --valid-every steps (loss, perplexity); --out "
                      "holds the best validated state. Works unchanged under torchrun "
                      "--nproc_per_node=N.")
    p.add_argument("--text", nargs="+", required=True, metavar="FILE", type=pathname,
                   help="text files")
    p.add_argument("--out", required=True, metavar="DIR", type=pathname, help="the run directory")
    p.add_argument("--resume", action="store_true",
                   help="continue the run in --out (the same text; a flag left out is the "
                   "run's own; only --max-steps, "
                   "--time-limit, --valid-every, --patience, --eval-blocks may change)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace the run in --out (a directory of other files is refused)")
    p.add_argument("--tokenizer", choices=("char", "bpe"), default="char",
                   help="char: the text's characters; bpe: byte-level BPE learned from it")
    p.add_argument("--vocab-size", type=ranged(VOCAB_RANGE),
                   help=f"BPE vocabulary (--tokenizer bpe; default {BPE_VOCAB})")
    m = p.add_argument_group("model (default: nanoGPT's architecture, 4 layers, width 128, "
                             "4 heads)")
    m.add_argument("--preset", choices=_presets(),
                   help="start from a preset's architecture and size (flags below override)")
    add_shape_flags(m, layers=None, d_model=None, heads=None, d_ff=None, layers_help="blocks")
    m.add_argument("--dropout", type=ranged(FRACTION), help="dropout (default 0)")
    _add_training_flags(p.add_argument_group("training"))
    p.set_defaults(run=run)


def _add_training_flags(t) -> None:
    """The LMTrainConfig flags, each checked with its field's range."""
    d, r = LMTrainConfig(), LM_TRAIN_RANGES
    add_max_len(t, dest="block_size", default=d.block_size, low=1,
                text="each training window's tokens")
    add_loop_flags(t, d, r, batch_help="windows of --block-size tokens per micro-batch")
    for flag, name, text in (
            ("--lr", "lr", "peak learning rate"),
            ("--min-lr", "min_lr", "learning rate at --max-steps (the cosine decay ends there)"),
            ("--weight-decay", "weight_decay", "AdamW decay on matrices"),
            ("--beta2", "beta2", "AdamW beta2"),
            ("--eval-blocks", "eval_blocks", "held-out blocks per validation")):
        t.add_argument(flag, dest=name, type=ranged(r[name]), default=getattr(d, name),
                       help=text)


def _presets() -> tuple[str, ...]:
    from decoderkit.nn.lm.presets import PRESETS

    return PRESETS


def run(args: argparse.Namespace) -> int:
    """Read the text, build the config and ``lm_fit``."""
    from decoderkit.training.lm.checkpoint import FILES, load_lm_checkpoint
    from decoderkit.training.lm.data import load_text
    from decoderkit.training.lm.fit import MAY_CHANGE, lm_fit
    from decoderkit.cli.resume import on_resume
    from decoderkit.training.resume import check_settings
    from decoderkit.training.rundir import check_out

    args, commands = on_resume(args, args.out, "decoderkit lm train")  # a flag left out: its own
    if args.vocab_size is not None and args.tokenizer != "bpe":
        raise UsageError("--vocab-size applies to --tokenizer bpe")
    check_step(args, args.block_size)
    set_threads(args)
    cfg = LMTrainConfig(block_size=args.block_size, batch_size=args.batch_size,
                        accum=args.accum, max_steps=args.max_steps, time_limit=args.time_limit,
                        lr=args.lr, min_lr=args.min_lr, warmup=warmup(args, LMTrainConfig()),
                        weight_decay=args.weight_decay, beta2=args.beta2, clip=args.clip or None,
                        valid_every=args.valid_every, eval_blocks=args.eval_blocks,
                        patience=args.patience, seed=args.seed)
    shape = model_config(args)  # checked before any work
    for file in args.text:
        check_input_file(file, "--text")
    tokenizer = None
    if args.resume:  # the run's own tokenizer
        check_out(args.out, resume=True, overwrite=False, files=FILES)
        ckpt = load_lm_checkpoint(args.out)
        tokenizer = ckpt.tokenizer
        _check_same_tokenizer(args, tokenizer)
        check_settings(cfg, ckpt.meta.get("train", {}), args.out, MAY_CHANGE)  # before work
    data = load_text(args.text, args.block_size, tokenizer=tokenizer, kind=args.tokenizer,
                     vocab_size=args.vocab_size or BPE_VOCAB)  # bad text: refused here
    check_out(args.out, resume=args.resume, overwrite=args.overwrite, files=FILES)
    config = dataclasses.replace(shape, vocab_size=data.tokenizer.vocab_size)
    say(f"{data.tokenizer.kind} tokenizer, {data.tokenizer.vocab_size} tokens; "
        f"{data.train_tokens:,} training tokens in {len(data.files)} file(s)")
    lm_fit(config, cfg, data, args.out, resume=args.resume, overwrite=args.overwrite,
           device=args.device, progress=not args.quiet, commands=commands)
    return 0


def _check_same_tokenizer(args: argparse.Namespace, tokenizer) -> None:
    """--resume trains on with the run's own tokenizer: a --tokenizer, or a --vocab-size below
    the run's vocabulary (BPE learns at most the size asked, fewer on a short text), that asks
    for another is refused, naming both."""
    for flag, given, saved, other in (
            ("--tokenizer", args.tokenizer, tokenizer.kind, args.tokenizer != tokenizer.kind),
            ("--vocab-size", args.vocab_size, tokenizer.vocab_size,
             args.vocab_size is not None and args.vocab_size < tokenizer.vocab_size)):
        if other:
            raise UsageError(f"cannot resume: {flag} is {given!r} here but {saved!r} in the run "
                             f"in {args.out} (a resumed run keeps its tokenizer)")


def model_config(args: argparse.Namespace):
    """The LMConfig the flags give (vocabulary size 1 until the tokenizer is known): the
    preset's (default: nanoGPT's architecture at CPU_SHAPE, no dropout), each size flag
    replacing its field, --d-ff the preset's rule (``ffn_width``: 4 d, a gated FFN 8 d / 3)
    when a new --d-model comes without it."""
    from decoderkit.base.config import replace_given
    from decoderkit.nn.lm.model import ffn_width
    from decoderkit.nn.lm.presets import lm_preset

    base = lm_preset(args.preset or DEFAULT_PRESET)
    if not args.preset:
        base = dataclasses.replace(base, **CPU_SHAPE, d_ff=4 * CPU_SHAPE["d_model"], dropout=0.0)
    d_ff = args.d_ff or (ffn_width(base.ffn, args.d_model) if args.d_model else None)
    return replace_given(base, dict(vocab_size=1, max_len=args.block_size, n_layers=args.layers,
                                    d_model=args.d_model, n_heads=args.heads, d_ff=d_ff,
                                    dropout=args.dropout))
