"""``decoderkit convert``: a model directory of another format as a decoderkit checkpoint."""

from __future__ import annotations

import argparse

FORMATS = ("marian",)  # --from: Hugging Face Marian (opus-mt) directories


def add(sub) -> None:
    """The subcommand with its format, source and output flags."""
    p = sub.add_parser("convert", help="write a Hugging Face Marian directory as a checkpoint",
                       description="Read a local Hugging Face Marian (opus-mt) directory and "
                       "write it as a decoderkit checkpoint (nothing is downloaded). Every "
                       "--checkpoint flag also takes the directory itself; a converted "
                       "checkpoint is fine-tuned with decoderkit train --resume --out OUT "
                       "--data TSV.")
    p.add_argument("--from", dest="source_format", required=True, choices=FORMATS,
                   help="the format of DIR")
    p.add_argument("directory", metavar="DIR", help="the model directory to read")
    p.add_argument("--out", required=True, metavar="CKPT", help="the checkpoint to write")
    p.add_argument("--overwrite", action="store_true",
                   help="replace the checkpoint in CKPT (a directory holding other files is "
                   "refused, naming them)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Convert, print where it went."""
    from decoderkit.interop.marian import convert_marian

    out = convert_marian(args.directory, args.out, args.overwrite)
    print(f"{out}: decoderkit checkpoint of {args.directory}; translate with "
          f"decoderkit translate --checkpoint {out}")
    return 0
