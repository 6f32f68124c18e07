"""``decoderkit convert``: a model directory of another format as a decoderkit checkpoint."""

from __future__ import annotations

import argparse

from decoderkit.cli.args import pathname

# --from: Hugging Face Marian (opus-mt) directories; Marian's own model.npz (or its directory)
FORMATS = ("marian", "marian-npz")


def add(sub) -> None:
    """The subcommand with its format, source and output flags."""
    p = sub.add_parser("convert", help="write a Marian model as a checkpoint",
                       description="Read a local Hugging Face Marian (opus-mt) directory "
                       "(--from marian) or a model Marian itself wrote (--from marian-npz: "
                       "model.npz, or its directory, with model.npz.decoder.yml and the "
                       "vocabularies it names) and write it as a decoderkit checkpoint "
                       "(nothing is downloaded). Every "
                       "--checkpoint flag also takes the directory itself; a converted "
                       "checkpoint is fine-tuned with decoderkit train --resume --out OUT "
                       "--data TSV.")
    p.add_argument("--from", dest="source_format", required=True, choices=FORMATS,
                   help="the format of DIR")
    p.add_argument("directory", metavar="DIR", type=pathname,
                   help="the model directory (or .npz) to read")
    p.add_argument("--out", required=True, metavar="CKPT", type=pathname,
                   help="the checkpoint to write")
    p.add_argument("--overwrite", action="store_true",
                   help="replace the checkpoint in CKPT (a directory holding other files is "
                   "refused, naming them)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Convert, print where it went."""
    from decoderkit.base.errors import UsageError
    from decoderkit.cli.resume import check_run
    from decoderkit.interop.checkpoints import convert_checkpoint, identify
    from decoderkit.interop.marian.hf import is_marian_directory
    from decoderkit.interop.marian.npz import MODEL, is_marian_npz

    readable = {"marian": (is_marian_directory, "a directory with a config.json whose "
                           "model_type is 'marian'"),
                "marian-npz": (is_marian_npz, f"a Marian .npz or a directory with {MODEL}")}
    test, expected = readable[args.source_format]
    if not test(args.directory):
        found = identify(args.directory)
        raise UsageError(f"--from {args.source_format}: {args.directory} is not {expected}"
                         + (f"; it is {found}" if found else ""))
    check_run(args.out, "decoderkit train")  # the run it writes: train --resume goes on
    out = convert_checkpoint(args.directory, args.out, args.overwrite)
    print(f"{out}: decoderkit checkpoint of {args.directory}; translate with "
          f"decoderkit translate --checkpoint {out}")
    return 0
