"""``decoderkit params``: the parameter table of a config or a checkpoint."""

from __future__ import annotations

import argparse

from decoderkit.base.checks import VOCAB, count
from decoderkit.cli.args import pathname, ranged
from decoderkit.cli.shape import add_norm_first, add_shape_flags, add_tie_generator
from decoderkit.nn.seq2seq.model import ModelConfig
from decoderkit.nn.norms import LAYER_NORMS
from decoderkit.nn.lm.presets import PRESETS, lm_preset


def add(sub) -> None:
    """The subcommand with the model-shape flags (default: the paper's base model)."""
    p = sub.add_parser("params", help="parameter-count table per component",
                       description="Parameters per component for any config, shared weights "
                       "counted once. Defaults: the paper's base model with a 37,000-word "
                       "vocabulary (seed 000's example).")
    p.add_argument("--checkpoint", metavar="DIR", type=pathname,
                   help="count the model config saved in DIR: "
                   "a translation checkpoint, or a decoder-only LM (lm train directory, Hugging "
                   "Face GPT directory, nanoGPT ckpt.pt); the other flags are then ignored")
    p.add_argument("--preset", choices=PRESETS, help="count a decoder-only LM preset (GPT-1, "
                   "GPT-2 sizes, nanoGPT; the other flags are then ignored)")
    vocab = ranged(count(4, VOCAB.high))  # the 4 special tokens, at least
    p.add_argument("--src-vocab", type=vocab, default=37000, help="source vocabulary size")
    p.add_argument("--tgt-vocab", type=vocab, default=37000, help="target vocabulary size")
    add_shape_flags(p, layers=6, d_model=512, heads=8, d_ff=2048,
                    layers_help="N: encoder layers and decoder layers (each)")
    add_norm_first(p)
    p.add_argument("--no-bias", action="store_true", help="no biases in attention and FFN")
    p.add_argument("--layer-norm", choices=LAYER_NORMS, default=LAYER_NORMS[0],
                   help="layer-norm variant")
    p.add_argument("--tie-embeddings", action="store_true",
                   help="share source and target embeddings (equal vocabularies)")
    add_tie_generator(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Print ``report.params.parameter_table`` of the flags' config or the checkpoint's."""
    from decoderkit.report.params import parameter_table

    if args.preset:
        print(parameter_table(lm_preset(args.preset), args.preset))
        return 0
    if args.checkpoint:
        from decoderkit.interop.checkpoints import checkpoint_config

        config = checkpoint_config(args.checkpoint)  # either family's
    else:
        config = ModelConfig(src_vocab=args.src_vocab, tgt_vocab=args.tgt_vocab,
                             n_layers=args.layers, d_model=args.d_model, n_heads=args.heads,
                             d_ff=args.d_ff, bias=not args.no_bias, norm_first=args.norm_first,
                             layer_norm=args.layer_norm, tie_embeddings=args.tie_embeddings,
                             tie_generator=args.tie_generator)
    print(parameter_table(config))
    return 0
