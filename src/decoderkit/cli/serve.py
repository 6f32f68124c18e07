"""``decoderkit serve``: a checkpoint behind an HTTP API, with the attention explorer at /.

The limit flags are the servers' limits dataclasses (``ServeLimits``, ``LMLimits``): ``--max-x``
fills field ``max_x``, with that field's range; a flag not given is the family's own default,
so the command line and the library cannot disagree.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import fields
from pathlib import Path

from decoderkit.base.errors import UsageError
from decoderkit.base.families import LM, SAID, SEQ2SEQ
from decoderkit.cli.args import integer, pathname, ranged, text
from decoderkit.cli.engines import (add_compile_flags, add_dtype_flag, add_engine_flags,
                                    add_prefix_flags, dtype_of, open_engine, prefix_cache_mb,
                                    use_compile_flags)
from decoderkit.serve.lm.limits import BODY_BYTES_PER_TOKEN, LM_RANGES, MIN_BODY_BYTES, LMLimits
from decoderkit.serve.seq2seq.limits import SERVE_RANGES, ServeLimits

TOKEN_ENV = "DECODERKIT_TOKEN"
OLD_WORK_FLAG = "--max-tokens"  # --max-work-tokens' name before 0.3: still parsed, with a warning
# family -> its limits dataclass and each field's range
LIMITS = {SEQ2SEQ: (ServeLimits, SERVE_RANGES), LM: (LMLimits, LM_RANGES)}
SIZED = {"max_body_bytes": f"{BODY_BYTES_PER_TOKEN} bytes x the model's context x "
         f"--max-inputs, at least {MIN_BODY_BYTES}: room for a whole-context conversation"}
LIMIT_HELP = {  # each limits field, in --help's order: what its flag bounds
    "max_batch": "rows decoded together: sentences (translation; 1: batching off), prompt x n "
                 "rows stepped together (LM)",
    "max_wait_ms": "how long a request waits for others to share its batch",
    "max_queue": "rows waiting to be decoded: sentences (translation: beyond, requests get "
                 "503), prompt x n rows (LM: beyond, 429)",
    "max_body_bytes": "request body size (413 beyond)",
    "max_inputs": "texts (translation) or prompts (LM) per request",
    "max_chars": "characters per text",
    "max_len": "cap on the new tokens a request may ask (translation: max_len, LM: "
               "max_tokens)",
    "max_beam": "cap on beam and n_best",
    "max_explain": "cap on explain (alternatives per step)",
    "max_n": "cap on n (completions per prompt)",
    "max_work_tokens": "the work budget: tokens one request may make the model compute: "
                       "inputs x beam x each input's max_len (translation: 422 beyond), "
                       "prompts x n x (prompt + max_tokens) (LM: 400 beyond)",
    "max_explain_values": "numbers one request's explain trace may hold: per step and input, "
                          "the alternatives and layers x heads x (prefix + source) weights "
                          "(422 beyond)",
}


def add(sub) -> None:
    """The subcommand with its address, token, request limits and batching flags."""
    p = sub.add_parser("serve", help="serve a checkpoint over HTTP (API + explorer page)",
                       description="Serve a checkpoint (or an export, in its engine). A "
                       "translation model: POST /v1/translate, GET /v1/model, GET /health, the "
                       "explorer page at /, OpenAPI docs at /docs; a refused request gets 422 "
                       "(503 when the queue is full). A decoder-only LM (an lm train directory, "
                       "a Hugging Face GPT-2 / OpenAI-GPT directory, a nanoGPT ckpt.pt): "
                       "OpenAI's legacy POST /v1/completions with continuous batching, POST "
                       "/v1/chat/completions where the directory has a chat template, "
                       "/v1/models, /tokenize, /detokenize, /metrics, the GPT explorer at / "
                       "(docs/lm-serving.md); a refused request gets 400 (429 when the queue "
                       "is full). Each limit flag applies to the families its help names, "
                       "with that family's default.")
    p.add_argument("--checkpoint", metavar="DIR", type=pathname,
                   help="a checkpoint directory (translation or LM)")
    p.add_argument("--adapter", metavar="[NAME=]DIR", type=pathname, action="append",
                   help="a LoRA adapter (an lm tune run or a PEFT adapter directory) on the LM "
                   "--checkpoint: NAME=DIR serves it beside the base, a request's model "
                   "picking it (repeatable; /v1/models lists them); DIR alone, once, merges "
                   "it into the base")
    add_engine_flags(p)
    add_compile_flags(p)  # an LM checkpoint's
    add_dtype_flag(p)  # an LM checkpoint's
    add_prefix_flags(p)  # an LM checkpoint's, in decoderkit
    p.add_argument("--host", type=text, default="127.0.0.1",
                   help="address to bind (default loopback; anything else warns)")
    p.add_argument("--port", type=integer(1, 65535), default=8000, help="TCP port")
    p.add_argument("--token", type=text, help=f"require 'Authorization: Bearer TOKEN' on the API "
                   f"(default: ${TOKEN_ENV} if set); visible ASCII, no spaces")
    add_limit_flags(p)
    p.add_argument("--threads", type=integer(1, 256),
                   help="the engine's intra-op threads (default: its own choice)")
    p.add_argument("--log-level", default="info",
                   choices=["critical", "error", "warning", "info", "debug"],
                   help="uvicorn's log level (info: one line per request)")
    p.set_defaults(run=run)


def add_limit_flags(p) -> None:
    """One flag per field of the limits dataclasses (``LIMIT_HELP``), its range the field's;
    the default None: the family's own (``--help`` states each family's)."""
    for name, words in LIMIT_HELP.items():
        owners = [(family, cls, ranges[name]) for family, (cls, ranges) in LIMITS.items()
                  if name in ranges]
        defaults = {family: _default(cls, name) for family, cls, _ in owners}
        said = (f"default {next(iter(defaults.values()))}" if len(set(defaults.values())) == 1
                else "default: " + ", ".join(f"{SAID[f]} {d}" for f, d in defaults.items()))
        only = "" if len(owners) == len(LIMITS) else f"{SAID[owners[0][0]]} only; "
        p.add_argument(f"--{name.replace('_', '-')}", type=ranged(owners[0][2]), default=None,
                       help=f"{words} ({only}{said})")
    p.add_argument(OLD_WORK_FLAG, dest="max_tokens", metavar="N",
                   type=ranged(LM_RANGES["max_work_tokens"]), default=None,
                   help="deprecated: --max-work-tokens (renamed: not OpenAI's max_tokens)")


def _default(cls, name: str) -> str:
    """The default of field ``name`` of ``cls``, in words (None: sized from the model)."""
    default = next(f.default for f in fields(cls) if f.name == name)
    return SIZED.get(name, "the model's max_len") if default is None else str(default)


def limits_of(args: argparse.Namespace, family: str):
    """The ``family``'s limits dataclass from the limit flags given (the others: its
    defaults); a flag of the other family only is refused naming it."""
    cls, ranges = LIMITS[family]
    given = {name: getattr(args, name) for name in LIMIT_HELP if getattr(args, name) is not None}
    if getattr(args, "max_tokens", None) is not None:
        if "max_work_tokens" in given:
            raise UsageError(f"{OLD_WORK_FLAG} is --max-work-tokens' old name: give one of them")
        print(f"decoderkit serve: warning: {OLD_WORK_FLAG} is deprecated, use "
              f"--max-work-tokens (the work budget; a request's max_tokens is its new tokens)",
              file=sys.stderr)
        given["max_work_tokens"] = args.max_tokens
    for name in given:
        if name not in ranges:
            other = next(f for f, (_, r) in LIMITS.items() if name in r)
            raise UsageError(f"--{name.replace('_', '-')} applies to {SAID[other]} checkpoints, "
                             f"not the {SAID[family]} {args.checkpoint}")
    return cls(**given)


def run(args: argparse.Namespace) -> int:
    """Load the checkpoint or export, build the app, serve until SIGTERM/SIGINT."""
    try:
        from decoderkit.serve.guards import check_token
        from decoderkit.serve.server import bind, is_loopback, serve
    except ImportError as err:
        raise UsageError(f"serving needs the serve extra (pip install 'decoderkit[serve]'): "
                         f"{err}") from None
    import torch

    token = args.token if args.token is not None else os.environ.get(TOKEN_ENV)
    if token is not None:
        check_token(token, f"--token (or ${TOKEN_ENV})")
    fmt = detected(args)
    lm = fmt is not None and fmt.family == LM
    limits = limits_of(args, LM if lm else SEQ2SEQ)
    if lm:
        check_lm_engine(args)
        adapters_of(args)
        prefix_cache_mb(args)
    elif args.adapter:
        raise UsageError(f"--adapter: a LoRA adapter adapts a language model, and "
                         f"{args.checkpoint or args.model} is a translation model")
    elif args.prefix_cache_mb is not None or args.no_prefix_reuse:
        raise UsageError(f"--prefix-cache-mb and --no-prefix-reuse apply to an LM's prompts; "
                         f"{args.checkpoint or args.model} is a translation model")
    elif args.compile or args.dtype != "float32":
        flag = "--compile compiles" if args.compile else f"--dtype {args.dtype} applies to"
        raise UsageError(f"{flag} an LM's decode step; {args.checkpoint or args.model}"
                         f" is a translation model, served without it")
    use_compile_flags(args)
    dtype_of(args)  # refused before the port is taken; lm_app asks again
    if args.threads:
        torch.set_num_threads(args.threads)
    sock = bind(args.host, args.port)  # before loading: a port in use is said at once
    try:
        served, app = (lm_app if lm else translation_app)(args, fmt, limits, token)
    except BaseException:
        sock.close()
        raise
    if not is_loopback(args.host):
        print(f"decoderkit serve: warning: {args.host} is not a loopback address: anyone who "
              f"can reach it can use the model" + ("" if token else " (no --token set)"),
              file=sys.stderr)
    lacks = f", without {', '.join(served.unavailable)}" if served.unavailable else ""
    if lm:
        what = "OpenAI completions" + (" and chat completions" if served.chat else
                                       ", no chat template")
    else:
        what = f"step {served.step}"
    print(f"decoderkit serve: {args.checkpoint or args.model} ({served.engine}{lacks}; {what}) "
          f"on http://{args.host}:{args.port}/", file=sys.stderr, flush=True)
    if lm and served.notes:
        print(f"decoderkit serve: a request leaving out temperature, top_p and top_k gets "
              f"{'; '.join(served.notes)}", file=sys.stderr, flush=True)
    serve(app, sock, args.log_level)
    return 0


def detected(args: argparse.Namespace):
    """The format of --checkpoint, None without one or none found (a cheap look that never
    raises: the one detection, whose ``load`` then opens it)."""
    from decoderkit.interop.checkpoints import detected as format_of

    return format_of(args.checkpoint) if args.checkpoint else None


def translation_app(args: argparse.Namespace, fmt, limits: ServeLimits, token: str | None):
    """(``Served``, app) of the translation model the flags name: --checkpoint (``fmt``) in
    PyTorch, or the export."""
    from decoderkit.interop.checkpoints import find_format
    from decoderkit.serve.seq2seq.app import create_app
    from decoderkit.serve.seq2seq.engines import from_checkpoint, from_export

    export = open_engine(args, threads=args.threads or 0)
    if export is not None:
        served = from_export(args.engine, export, args.int8)
    else:  # Not prepacked (unlike translate): a server sees ever-new batch shapes, and the
        # packed kernels' per-shape state grew its memory 293 -> 970 MiB over 2000 varied
        # batches, with no speed gain at the demo's size (benchmarks/log/, serving).
        if fmt is None or fmt.family != SEQ2SEQ:  # what serve takes, in the refusal
            fmt = find_format(args.checkpoint, families=(SEQ2SEQ, LM))
        served = from_checkpoint(fmt.load(Path(args.checkpoint), "cpu"), args.int8)
    return served, create_app(served, limits, token)


def check_lm_engine(args: argparse.Namespace) -> None:
    """An LM --checkpoint runs in decoderkit, or in CTranslate2 from --model."""
    if args.engine == "onnxruntime" or (args.engine == "ctranslate2") != bool(args.model):
        raise UsageError(f"an LM --checkpoint runs in decoderkit (--int8: int8) or, with "
                         f"--engine ctranslate2 --model DIR, in CTranslate2 from that conversion "
                         f"of it; got --engine {args.engine}"
                         + (f" --model {args.model}" if args.model else " without --model"))
    if args.engine == "ctranslate2" and args.int8:
        raise UsageError("--int8 with --engine ctranslate2: convert with --quantization "
                         "int8 instead (ct2-transformers-converter)")
    if args.engine == "ctranslate2" and args.prefix_cache_mb is not None:
        raise UsageError("--prefix-cache-mb with --engine ctranslate2: CTranslate2's generator "
                         "keeps no prefixes; prefix reuse is decoderkit's engine's")
    if args.engine == "ctranslate2" and args.compile:
        raise UsageError("--compile with --engine ctranslate2: CTranslate2 runs its own "
                         "kernels; --compile applies to decoderkit's engine")


def lm_app(args: argparse.Namespace, fmt, limits: LMLimits, token: str | None):
    """(``ServedLM``, app) of the LM --checkpoint (``fmt``): float32 rowwise, --int8, or
    CTranslate2 on its conversion in --model (``serve.lm.engines.from_checkpoint``)."""
    from decoderkit.cli.lm.common import with_tokenizer
    from decoderkit.serve.lm.app import create_lm_app
    from decoderkit.serve.lm.engines import from_checkpoint

    from decoderkit.interop.lm.peft import with_adapter

    merged, named = adapters_of(args)
    ckpt = fmt.load(Path(args.checkpoint), "cpu")
    if merged is not None:  # the tuned model, served under the adapter's name
        with_adapter(ckpt, merged)
    ckpt = with_tokenizer(ckpt, args.checkpoint)
    served = from_checkpoint(ckpt, merged or args.checkpoint,
                             args.model if args.engine == "ctranslate2" else None,
                             args.threads or 0, args.int8, args.compile, args.autotune,
                             dtype_of(args), named, prefix_cache_mb(args))
    return served, create_lm_app(served, limits, token)


def adapters_of(args: argparse.Namespace) -> tuple[str | None, dict[str, str]]:
    """(the adapter to merge into the base, the adapters to serve beside it by id) of
    --adapter; one merged and ones beside it, two merged, an id twice, or adapters on a
    --checkpoint that is itself one are refused naming the flags."""
    from decoderkit.interop.lm.peft import is_adapter
    from decoderkit.serve.lm.adapters import check_adapter_engine, split_adapter

    merged, named = [], {}
    for value in args.adapter or ():
        name, directory = split_adapter(value)
        if name is None:
            merged.append(directory)
        elif name in named:
            raise UsageError(f"--adapter {value}: the id {name!r} is given twice")
        else:
            named[name] = directory
    if len(merged) > 1 or (merged and named):
        raise UsageError(f"--adapter {merged[-1]}: DIR alone merges one adapter into the base; "
                         "serve several beside it as --adapter NAME=DIR each")
    if named and is_adapter(args.checkpoint):
        raise UsageError(f"--adapter NAME=DIR with --checkpoint {args.checkpoint}, an adapter "
                         "itself: give its base as --checkpoint and each adapter as NAME=DIR")
    if merged and args.engine == "ctranslate2":
        raise UsageError("--adapter with --engine ctranslate2: its --model conversion holds "
                         "the base; convert the merged model (lm export --merge) instead")
    if named:
        check_adapter_engine(args.int8, args.compile, args.engine == "ctranslate2")
    return (merged[0] if merged else None), named
