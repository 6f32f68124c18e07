"""The engine flags of the commands that run a translation model (``translate``, ``eval``,
``serve``): --engine, --model, --int8, and opening what they name."""

from __future__ import annotations

import argparse

from decoderkit.base.errors import UsageError
from decoderkit.base.checks import DEFAULT_PREFIX_CACHE_MB, PREFIX_CACHE_MB
from decoderkit.cli.args import pathname, ranged
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
    """--compile, --autotune and --compile-cache: decode with a step compiled by
    torch.compile (``translate``; an LM's ``lm sample``, ``lm chat`` and ``serve``)."""
    p.add_argument("--compile", action="store_true",
                   help="decode with a torch.compile'd step (weights frozen): faster steps, "
                   "but the first ones compile, tens of seconds to minutes (needs a C++ "
                   "compiler on CPU)")
    p.add_argument("--autotune", action="store_true",
                   help="with --compile: time generated GEMM kernels too (compiles about twice "
                   "as long; faster steps for a single sentence or stream)")
    p.add_argument("--compile-cache", metavar="DIR", type=pathname,
                   help="with --compile: the directory of PyTorch's compile caches, from which "
                   "a later start of the same model compiles in seconds (default "
                   "$TORCHINDUCTOR_CACHE_DIR, else ~/.cache/decoderkit/torch-compile)")


def add_prefix_flags(p) -> None:
    """--prefix-cache-mb and --no-prefix-reuse: an LM's prompts' keys and values kept for
    prompts that begin alike (``generation.lm.prefix``; ``lm chat``, ``serve``)."""
    p.add_argument("--prefix-cache-mb", metavar="MB", type=ranged(PREFIX_CACHE_MB),
                   help=f"MiB of prompts' keys and values kept, least recently used out: a "
                   f"prompt beginning as a kept one prefills only the rest, its tokens "
                   f"unchanged (default {DEFAULT_PREFIX_CACHE_MB}; off with --compile, whose "
                   f"eager prefill rounds by the prompt's length)")
    p.add_argument("--no-prefix-reuse", action="store_true",
                   help="prefill every prompt whole (no keys and values kept)")


def prefix_cache_mb(args: argparse.Namespace) -> int | None:
    """The prefix store's MiB the flags ask for; None: off (--no-prefix-reuse, --compile);
    --prefix-cache-mb beside either refused."""
    off = "--no-prefix-reuse" if args.no_prefix_reuse else "--compile" if args.compile \
        else None
    if off and args.prefix_cache_mb is not None:
        raise UsageError(f"--prefix-cache-mb {args.prefix_cache_mb} with {off}: prefix reuse "
                         f"is off with {off}")
    if off:
        return None
    return DEFAULT_PREFIX_CACHE_MB if args.prefix_cache_mb is None else args.prefix_cache_mb


def add_dtype_flag(p) -> None:
    """--dtype: the LM's weights and activations (``lm sample``, ``lm chat``, ``serve``)."""
    p.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32",
                   help="an LM's weights and activations: bfloat16 halves the bytes read per "
                   "token (with --int8: int8 weights, bfloat16 activations); needs a CPU with "
                   "native bfloat16 (lscpu: avx512_bf16 or amx_bf16); logits widened to "
                   "float32")


def dtype_of(args: argparse.Namespace):
    """--dtype as a torch dtype, checked: bfloat16 refused in one line on a CPU without it."""
    from decoderkit.generation.bfloat16 import DTYPES, check_native_bf16

    dtype = DTYPES[args.dtype]
    check_native_bf16(dtype)
    return dtype


def use_compile_flags(args: argparse.Namespace) -> None:
    """--autotune and --compile-cache need --compile; with it, PyTorch's compile caches go to
    --compile-cache (or the default: ``generation.compiling.default_compile_cache``)."""
    from decoderkit.base.checks import check_autotune

    check_autotune(args.compile, args.autotune)
    if args.compile_cache is not None and not args.compile:
        raise UsageError("--compile-cache needs --compile")
    if args.compile:  # imported here: torch.compile's machinery adds about 1 s to start-up
        from decoderkit.generation.compiling import use_compile_cache

        use_compile_cache(args.compile_cache)


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
