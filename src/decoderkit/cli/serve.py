"""``decoderkit serve``: a checkpoint behind an HTTP API, with the attention explorer at /."""

from __future__ import annotations

import argparse
import os
import sys

from decoderkit.base.checks import BODY_BYTES, size
from decoderkit.base.errors import UsageError
from decoderkit.cli.args import integer, number, pathname, ranged, text
from decoderkit.cli.shape import MAX_POSITIONS
from decoderkit.cli.seq2seq.translate import add_engine_flags, open_engine

TOKEN_ENV = "DECODERKIT_TOKEN"


def add(sub) -> None:
    """The subcommand with its address, token, request limits and batching flags."""
    p = sub.add_parser("serve", help="serve a checkpoint over HTTP (API + explorer page)",
                       description="Serve a checkpoint (or an export, in its engine). A "
                       "translation model: POST /v1/translate, GET /v1/model, GET /health, the "
                       "explorer page at /, OpenAPI docs at /docs. A decoder-only LM (an lm "
                       "train directory, a Hugging Face GPT-2 / OpenAI-GPT directory, a "
                       "nanoGPT ckpt.pt): OpenAI's legacy POST /v1/completions with continuous "
                       "batching, POST /v1/chat/completions where the directory has a chat "
                       "template, /v1/models, /tokenize, /detokenize, /metrics, the GPT "
                       "explorer at / (docs/lm-serving.md); the limit flags keep their names "
                       "(--max-batch: rows stepped together, --max-queue: rows waiting, "
                       "--max-inputs: prompts, --max-len: max_tokens, --max-tokens: rows x "
                       "(prompt + max_tokens)).")
    p.add_argument("--checkpoint", metavar="DIR", type=pathname,
                   help="a checkpoint directory (translation "
                   "or LM)")
    add_engine_flags(p)
    p.add_argument("--host", type=text, default="127.0.0.1",
                   help="address to bind (default loopback; anything else warns)")
    p.add_argument("--port", type=integer(1, 65535), default=8000, help="TCP port")
    p.add_argument("--token", type=text, help=f"require 'Authorization: Bearer TOKEN' on the API "
                   f"(default: ${TOKEN_ENV} if set); visible ASCII, no spaces")
    p.add_argument("--max-batch", type=integer(1, 4096), default=32,
                   help="most sentences decoded together (1: batching off)")
    p.add_argument("--max-wait-ms", type=number(0, 60_000), default=5.0,
                   help="how long a request waits for others to share its batch")
    p.add_argument("--max-queue", type=ranged(size()), default=1024,
                   help="sentences waiting to be decoded; beyond, requests get 503")
    p.add_argument("--max-body-bytes", type=ranged(BODY_BYTES), default=65_536,
                   help="request body size (413 beyond)")
    p.add_argument("--max-inputs", type=ranged(size()), default=32, help="texts per request")
    p.add_argument("--max-chars", type=ranged(size()), default=512, help="characters per text")
    p.add_argument("--max-len", type=integer(1, MAX_POSITIONS), help="cap on a request's max_len "
                   "(default: the model's max_len)")
    p.add_argument("--max-beam", type=integer(1, 64), default=8, help="cap on beam and n_best")
    p.add_argument("--max-explain", type=integer(0, 100), default=10,
                   help="cap on explain (alternatives per step)")
    p.add_argument("--max-tokens", type=ranged(size()), default=32_768,
                   help="tokens one request may make the decoder compute: inputs x beam x "
                   "each input's max_len (422 beyond)")
    p.add_argument("--max-explain-values", type=ranged(size()), default=1_000_000,
                   help="numbers one request's explain trace may hold: per step and input, "
                   "the alternatives and layers x heads x (prefix + source) weights (422 beyond)")
    p.add_argument("--threads", type=integer(1, 256),
                   help="the engine's intra-op threads (default: its own choice)")
    p.add_argument("--log-level", default="info",
                   choices=["critical", "error", "warning", "info", "debug"],
                   help="uvicorn's log level (info: one line per request)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Load the checkpoint or export, build the app, serve until SIGTERM/SIGINT."""
    try:
        from decoderkit.serve.seq2seq.app import create_app
        from decoderkit.serve.guards import check_token
        from decoderkit.serve.server import bind, is_loopback, serve
    except ImportError as err:
        raise UsageError(f"serving needs the serve extra (pip install 'decoderkit[serve]'): "
                         f"{err}") from None
    import torch

    from decoderkit.serve.seq2seq.limits import ServeLimits

    token = args.token if args.token is not None else os.environ.get(TOKEN_ENV)
    if token is not None:
        check_token(token, f"--token (or ${TOKEN_ENV})")
    limits = ServeLimits(max_body_bytes=args.max_body_bytes, max_inputs=args.max_inputs,
                         max_chars=args.max_chars, max_len=args.max_len,
                         max_beam=args.max_beam, max_explain=args.max_explain,
                         max_batch=args.max_batch, max_wait_ms=args.max_wait_ms,
                         max_queue=args.max_queue, max_tokens=args.max_tokens,
                         max_explain_values=args.max_explain_values)
    if args.threads:
        torch.set_num_threads(args.threads)
    lm = _lm_checkpoint(args)
    sock = bind(args.host, args.port)  # before loading: a port in use is said at once
    try:
        if lm:
            from decoderkit.serve.lm.app import create_lm_app

            served = load_lm(args)
            app = create_lm_app(served, lm_limits(args), token)
        else:
            served = load(args)
            app = create_app(served, limits, token)
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
        print(f"decoderkit serve: a request that sets none of them gets "
              f"{'; '.join(served.notes)}", file=sys.stderr, flush=True)
    serve(app, sock, args.log_level)
    return 0


def load(args: argparse.Namespace):
    """The ``Served`` engine the flags name: the checkpoint in PyTorch, or the export."""
    from decoderkit.interop.checkpoints import LM, TRANSLATION, load_checkpoint
    from decoderkit.serve.seq2seq.engines import from_checkpoint, from_export

    export = open_engine(args, threads=args.threads or 0)
    if export is not None:
        return from_export(args.engine, export, args.int8)
    # Not prepacked (unlike translate): a server sees ever-new batch shapes, and the packed
    # kernels' per-shape state grew its memory 293 -> 970 MiB over 2000 varied batches,
    # with no speed gain at the demo's size (benchmarks/README.md, serving).
    return from_checkpoint(load_checkpoint(args.checkpoint, families=(TRANSLATION, LM)),
                           args.int8)  # LM: what else serve takes, in its refusals


TRANSLATION_ONLY = ("max_beam", "max_explain", "max_explain_values", "max_chars",
                    "max_wait_ms")  # flags an LM server has no use for


def _lm_checkpoint(args: argparse.Namespace) -> bool:
    """True when --checkpoint is a decoder-only LM (an lm train directory, a Hugging Face
    GPT-2 / OpenAI-GPT directory, a nanoGPT ckpt.pt): the OpenAI-compatible LM server."""
    from decoderkit.interop.checkpoints import LM, family_of

    if not args.checkpoint or family_of(args.checkpoint) != LM:
        return False
    if args.engine == "onnxruntime" or (args.engine == "ctranslate2") != bool(args.model):
        raise UsageError(f"an LM --checkpoint runs in decoderkit (--int8: int8) or, with "
                         f"--engine ctranslate2 --model DIR, in CTranslate2 from that conversion "
                         f"of it; got --engine {args.engine}"
                         + (f" --model {args.model}" if args.model else " without --model"))
    defaults = add_defaults()
    for name in TRANSLATION_ONLY:
        if getattr(args, name) != defaults[name]:
            raise UsageError(f"--{name.replace('_', '-')} applies to translation "
                             f"checkpoints, not the LM {args.checkpoint}")
    return True


def add_defaults() -> dict:
    """The serve flags' defaults, as ``add`` declares them."""
    parser = argparse.ArgumentParser()
    add(parser.add_subparsers())
    return vars(parser.parse_args(["serve"]))


def lm_limits(args: argparse.Namespace):
    """The LM server's caps from the shared flags: --max-inputs prompts, --max-len new
    tokens, --max-tokens work (rows x (prompt + max_tokens)), --max-batch rows stepped
    together, --max-queue rows waiting."""
    from decoderkit.serve.lm.limits import LMLimits

    return LMLimits(max_body_bytes=args.max_body_bytes, max_prompts=args.max_inputs,
                    max_tokens=args.max_len, max_work=args.max_tokens,
                    max_running=args.max_batch, max_queue=args.max_queue)


def load_lm(args: argparse.Namespace):
    """The LM --checkpoint as a ``ServedLM`` (float32 rowwise, --int8, or CTranslate2 on its
    conversion in --model); its id is the checkpoint's name, its chat template and generation
    defaults the directory's."""
    from dataclasses import replace
    from pathlib import Path

    from decoderkit.cli.lm.common import open_lm
    from decoderkit.training.lm.chat import ChatTemplate, no_template
    from decoderkit.serve.lm.engines import from_lm

    ckpt = open_lm(args.checkpoint)
    model, tokenizer = ckpt.model, ckpt.tokenizer
    path = Path(args.checkpoint).resolve()
    name = path.parent.name if path.is_file() else path.name
    chat = {"chat": ChatTemplate.find(path), "no_chat": no_template(args.checkpoint)
            + " (POST /v1/completions takes plain text)", "generation": ckpt.generation}
    if args.engine == "ctranslate2":
        from decoderkit.serve.lm.engines import from_ctranslate2

        if args.int8:
            raise UsageError("--int8 with --engine ctranslate2: convert with --quantization "
                             "int8 instead (ct2-transformers-converter)")
        return replace(from_ctranslate2(args.model, model, tokenizer, name, args.threads or 0),
                       **chat)
    return replace(from_lm(model, tokenizer, name, args.int8), **chat)
