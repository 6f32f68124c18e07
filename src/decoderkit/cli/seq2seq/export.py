"""``decoderkit export``: a checkpoint as a CTranslate2 model or as ONNX graphs."""

from __future__ import annotations

import argparse

from decoderkit.base.errors import UsageError
from decoderkit.cli.args import pathname
from decoderkit.interop.seq2seq.ctranslate2 import QUANTIZATIONS
from decoderkit.interop.engines import EXPORTS


def add(sub) -> None:
    """The subcommand with its checkpoint, target, output and weight-type flags."""
    p = sub.add_parser("export", help="export a checkpoint to CTranslate2, ONNX or Hugging Face",
                       description="Write a checkpoint as a CTranslate2 model directory or as "
                       "ONNX encoder and decoder-step graphs, with its tokenizers; run it with "
                       "decoderkit translate --engine ctranslate2|onnxruntime --model OUT. "
                       "--to transformers writes a Hugging Face Marian directory (for "
                       "checkpoints that came from one), --to marian Marian's own model.npz "
                       "directory (for checkpoints read from one, fine-tuned or not).")
    p.add_argument("--checkpoint", required=True, metavar="DIR", type=pathname,
                   help="a checkpoint directory")
    p.add_argument("--to", required=True, choices=EXPORTS, help="target format")
    p.add_argument("--out", required=True, metavar="OUT", type=pathname,
                   help="the directory to write")
    p.add_argument("--quantization", choices=QUANTIZATIONS, default="float32",
                   help="CTranslate2 weight type (ONNX: float32 only)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing OUT")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Export, check by loading, print where it went."""
    from decoderkit.base.families import LM, SEQ2SEQ
    from decoderkit.interop.checkpoints import load_checkpoint

    if args.to != "ctranslate2" and args.quantization != "float32":
        raise UsageError(f"--quantization {args.quantization} applies to --to ctranslate2; "
                         f"--to {args.to} writes float32")
    ckpt = load_checkpoint(args.checkpoint, families=(SEQ2SEQ,),
                           use={LM: "decoderkit lm export"})
    if args.to == "transformers":
        from decoderkit.interop.marian.hf_export import export_transformers

        out = export_transformers(ckpt, args.out, args.overwrite)
        print(f"{out}: a Hugging Face Marian directory (MarianMTModel, MarianTokenizer); "
              f"decoderkit reads it too: decoderkit translate --checkpoint {out}")
        return 0
    if args.to == "marian":
        from decoderkit.interop.marian.npz_export import export_marian

        out = export_marian(ckpt, args.out, args.overwrite)
        print(f"{out}: a Marian model; run it with marian-decoder -c "
              f"{out}/model.npz.decoder.yml, or decoderkit translate --checkpoint {out}")
        return 0
    if args.to == "ctranslate2":
        from decoderkit.interop.seq2seq.ctranslate2 import export_ctranslate2

        out = export_ctranslate2(ckpt, args.out, args.quantization, args.overwrite)
        engine = "ctranslate2"
    else:
        from decoderkit.interop.onnx.export import export_onnx

        out = export_onnx(ckpt, args.out, args.overwrite)
        engine = "onnxruntime"
    print(f"{out}: {args.to} ({args.quantization}); run it with "
          f"decoderkit translate --engine {engine} --model {out}")
    return 0
