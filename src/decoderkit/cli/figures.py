"""``decoderkit figures``: the seed figures, and attention maps from a checkpoint."""

from __future__ import annotations

import argparse

from decoderkit.base.errors import UsageError
from decoderkit.base.files import resolve_output_dir
from decoderkit.cli.args import integer, pathname, text
from decoderkit.report.seq2seq.figure_names import ATTENTION, DEFAULT_TEXT, FORMATS, SEED_FIGURES


def add(sub) -> None:
    """The subcommand with its output, selection and format flags."""
    p = sub.add_parser("figures", help="draw the seed figures and attention maps",
                       description="Draw the seed figures (PNG and SVG) into --out; with "
                       "--checkpoint also the self- and cross-attention maps of one translation.")
    p.add_argument("--out", required=True, metavar="DIR", type=pathname,
                   help="directory to write into")
    p.add_argument("--checkpoint", metavar="DIR", type=pathname,
                   help="trained checkpoint for attention maps")
    p.add_argument("--text", type=text, default=DEFAULT_TEXT,
                   help="source sentence for the attention maps (default: %(default)s)")
    p.add_argument("--only", nargs="+", metavar="NAME", choices=(*SEED_FIGURES, ATTENTION),
                   help=f"draw only these figures ({' '.join((*SEED_FIGURES, ATTENTION))})")
    p.add_argument("--format", nargs="+", choices=FORMATS, default=list(FORMATS),
                   help=f"file formats (default: {' '.join(FORMATS)})")
    p.add_argument("--dpi", type=integer(10, 1200), default=100,
                   help="PNG resolution (default: %(default)s)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Draw the chosen figures and print each path written."""
    from decoderkit.report.seq2seq.figures import draw_figures

    if ATTENTION in (args.only or []) and not args.checkpoint:
        raise UsageError(f"--only {ATTENTION} needs --checkpoint DIR")
    resolve_output_dir(args.out, "--out")  # '', a symlink loop or a dangling one: refused
    for path in draw_figures(args.out, args.only, args.format, args.dpi, args.checkpoint,
                             args.text):
        print(path)
    return 0
