"""The engine flags of the commands that run a translation model (``translate``, ``eval``,
``serve``): --engine, --model, --int8, and opening what they name."""

from __future__ import annotations

import argparse

from decoderkit.base.errors import UsageError
from decoderkit.cli.args import pathname
from decoderkit.interop.engines import ENGINES, open_export


def add_engine_flags(p) -> None:
    """--engine, --model and --int8."""
    p.add_argument("--engine", choices=ENGINES, default="decoderkit",
                   help="decoderkit: the checkpoint in PyTorch; ctranslate2 / onnxruntime: an "
                   "export (decoderkit export) given by --model")
    p.add_argument("--model", metavar="DIR", type=pathname,
                   help="an export directory, for --engine "
                   "ctranslate2 or onnxruntime")
    p.add_argument("--int8", action="store_true",
                   help="int8 linears with dynamic activation quantization (decoderkit, "
                   "ctranslate2)")


def add_compile_flags(p) -> None:
    """--compile and --autotune: decode with a step compiled by torch.compile (``translate``;
    an LM's ``lm sample``, ``lm chat`` and ``serve``)."""
    p.add_argument("--compile", action="store_true",
                   help="decode with a torch.compile'd step (weights frozen): faster steps, "
                   "but the first ones compile, tens of seconds to minutes (needs a C++ "
                   "compiler on CPU)")
    p.add_argument("--autotune", action="store_true",
                   help="with --compile: time generated GEMM kernels too (compiles about twice "
                   "as long; faster steps for a single sentence or stream)")


def open_engine(args: argparse.Namespace, threads: int = 0, workers: int = 1):
    """None for ``--engine decoderkit`` (the caller loads ``--checkpoint``), else the loaded
    export (``threads``: the engine's, 0 its default; ``workers``: its batches at once);
    checks the flags."""
    if args.engine == "decoderkit":
        if args.model or not args.checkpoint:
            raise UsageError("--engine decoderkit needs --checkpoint DIR (--model names an "
                             "export: add --engine ctranslate2 or onnxruntime)")
        return None
    if not args.model or args.checkpoint:
        raise UsageError(f"--engine {args.engine} needs --model DIR (an export from "
                         f"decoderkit export), not --checkpoint")
    return open_export(args.engine, args.model, int8=args.int8, threads=threads,
                       workers=workers)
