"""The ``decoderkit`` command: argparse subcommands, each a thin wrapper over library calls.

User mistakes (bad files, flags, configs) end as one clear line on stderr and exit status 2,
never a traceback.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import distributed
from .data import read_tsv
from .fit import DataConfig, TrainConfig, check_fresh, fit, prepare_data


class UserError(Exception):
    """A mistake of the user's (bad file, flag or config): reported as one line, exit 2."""


def add_shape_flags(group, *, layers: int, d_model: int, heads: int, d_ff: int) -> None:
    """The model-shape flags shared by ``train`` and ``params`` (with their own defaults)."""
    group.add_argument("--layers", type=int, default=layers,
                       help="N: encoder layers and decoder layers (each)")
    group.add_argument("--d-model", type=int, default=d_model, help="model width d")
    group.add_argument("--heads", type=int, default=heads, help="attention heads h")
    group.add_argument("--d-ff", type=int, default=d_ff, help="feed-forward width f")
    group.add_argument("--norm-first", action="store_true",
                       help="pre-norm x + F(LN(x)) instead of post-norm LN(x + F(x)); "
                       "pre-norm stacks end in a final norm")


# --- train ---
def add_train(sub) -> None:
    """``decoderkit train``: the subcommand with its data, model, training and output flags."""
    p = sub.add_parser("train", help="train a model on a built-in task or your TSV corpus",
                       description="Train with Adam (0.9, 0.98, 1e-9) under the warm-up schedule, "
                       "validate periodically, checkpoint to --out. Works unchanged under "
                       "torchrun --nproc_per_node=N (DistributedDataParallel).")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--task", help="built-in task: copy, reverse, sort or dates")
    src.add_argument("--data", metavar="TSV", help="your corpus: 'source<TAB>target' lines")
    src.add_argument("--src", metavar="FILE", help="your corpus: sources (with --tgt)")
    p.add_argument("--tgt", metavar="FILE", help="targets, line-aligned with --src")
    p.add_argument("--out", metavar="DIR", help="checkpoint directory (default runs/<task|data>)")
    p.add_argument("--resume", action="store_true", help="continue the checkpoint in --out")
    p.add_argument("--overwrite", action="store_true", help="replace a checkpoint in --out")
    m = p.add_argument_group("model")
    add_shape_flags(m, layers=2, d_model=128, heads=4, d_ff=512)
    m.add_argument("--dropout", type=float, default=0.1, help="dropout rate")
    m.add_argument("--max-len", type=int, default=256, help="longest sequence (positions)")
    t = p.add_argument_group("training")
    d = TrainConfig()
    t.add_argument("--batch-size", type=int, default=d.batch_size, help="sentences per batch")
    t.add_argument("--accum", type=int, default=d.accum, help="micro-batches per step")
    t.add_argument("--max-steps", type=int, default=d.max_steps, help="optimiser steps")
    t.add_argument("--time-limit", type=float, help="stop after this many seconds of training")
    t.add_argument("--warmup", type=int, default=d.warmup, help="warm-up steps")
    t.add_argument("--lr-factor", type=float, default=d.lr_factor, help="noam factor")
    t.add_argument("--smoothing", type=float, default=d.smoothing, help="label smoothing eps")
    t.add_argument("--clip", type=float, default=d.clip, help="max gradient norm (0: none)")
    t.add_argument("--valid-every", type=int, default=d.valid_every, help="steps per validation")
    t.add_argument("--patience", type=int, default=d.patience,
                   help="early stop after this many validations without a lower loss (0: never)")
    t.add_argument("--target-exact", type=float, help="stop once exact match reaches this")
    t.add_argument("--seed", type=int, default=d.seed, help="seed of everything")
    t.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                   help="where to run: auto = CUDA when present, else CPU")
    t.add_argument("--threads", type=int, help="CPU threads for torch (default: torch's choice; "
                   "1 is fastest on a busy machine)")
    t.add_argument("--show", type=int, default=5, help="held-out translations printed at the end")
    t.add_argument("--quiet", action="store_true", help="no progress bar")
    g = p.add_argument_group("data")
    dd = DataConfig()
    g.add_argument("--train-size", type=int, default=dd.train_size, help="task pairs generated")
    g.add_argument("--valid-size", type=int, default=dd.valid_size, help="held-out pairs")
    g.add_argument("--vocab-size", type=int, default=dd.vocab_size, help="BPE vocabulary per side")
    p.set_defaults(func=_train)


def _data_config(args: argparse.Namespace) -> DataConfig:
    if bool(args.src) != bool(args.tgt):
        raise UserError("--src and --tgt go together")
    return DataConfig(task=args.task, tsv=args.data, src=args.src, tgt=args.tgt,
                      train_size=args.train_size, valid_size=args.valid_size,
                      vocab_size=args.vocab_size, max_tokens=args.max_len - 2, seed=args.seed)


def _train(args: argparse.Namespace) -> int:
    """Build the data, ModelConfig and TrainConfig from ``args`` and ``fit``; exit status 0."""
    import torch

    from .checkpoint import load_checkpoint
    from .model import ModelConfig

    out = Path(args.out or Path("runs") / (args.task or Path(args.data or args.src).stem))
    data_cfg = _data_config(args)
    if args.threads is not None:
        if args.threads < 1:
            raise UserError(f"--threads must be >= 1, got {args.threads}")
        torch.set_num_threads(args.threads)
    tokenizers = None
    if args.resume:
        ckpt = load_checkpoint(out)
        tokenizers = (ckpt.src_tokenizer, ckpt.tgt_tokenizer)
    else:
        check_fresh(out, args.overwrite)  # before generating data: fail fast
    data = prepare_data(data_cfg, tokenizers)
    s, t = data.src_tokenizer, data.tgt_tokenizer
    config = ModelConfig(s.vocab_size, t.vocab_size, args.layers, args.d_model, args.heads,
                         args.d_ff, args.dropout, args.norm_first, max_len=args.max_len)
    cfg = TrainConfig(args.batch_size, args.accum, args.max_steps, args.time_limit, args.warmup,
                      args.lr_factor, args.smoothing, args.clip or None, args.valid_every,
                      args.patience, args.target_exact, args.seed)
    fit(config, cfg, data, out, resume=args.resume, overwrite=args.overwrite,
        device=args.device, show=args.show, progress=not args.quiet)
    return 0


# --- translate ---
def add_translate(sub) -> None:
    """``decoderkit translate``: greedy, beam or sampled outputs of a checkpoint."""
    p = sub.add_parser("translate", help="translate text with a trained checkpoint",
                       description="Translate each TEXT argument, or else each line of stdin; "
                       "one output line per input line.")
    p.add_argument("text", nargs="*", metavar="TEXT", help="text to translate (none: stdin)")
    p.add_argument("--checkpoint", required=True, metavar="DIR", help="a checkpoint directory")
    p.add_argument("--beam", type=int, default=1, metavar="N", help="beam size (1: greedy)")
    p.add_argument("--length-penalty", type=float, default=1.0,
                   help="beam ranking: log p / length ** this")
    p.add_argument("--sample", action="store_true", help="sample instead of greedy/beam")
    p.add_argument("--temperature", type=float, default=1.0, help="sampling temperature")
    p.add_argument("--top-k", type=int, default=0, help="sample from the k most likely (0: all)")
    p.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling mass")
    p.add_argument("--seed", type=int, help="sampling seed (reproducible output)")
    p.add_argument("--max-len", type=int, help="most tokens per output (default 2 x source + 16)")
    p.add_argument("--batch-size", type=int, default=32, help="lines decoded together")
    p.add_argument("--explain", action="store_true",
                   help="print each step's top alternatives with log-probabilities")
    p.add_argument("--explain-top", type=int, default=5, metavar="K", help="alternatives shown")
    p.add_argument("--explain-out", metavar="FILE.json",
                   help="with --explain: write every step, attention weights included, as JSON")
    p.add_argument("--compile", action="store_true",
                   help="decode with a torch.compile'd step: faster for many lines, but "
                   "compiling first takes tens of seconds (needs a C++ compiler on CPU)")
    p.add_argument("--autotune", action="store_true",
                   help="with --compile: time generated GEMM kernels too (compiles about twice "
                   "as long; faster steps for single sentences)")
    p.set_defaults(func=_translate)


def _translate(args: argparse.Namespace) -> int:
    from .checkpoint import load_checkpoint
    from .packing import prepack
    from .translate import DecodeOptions, translate_lines, write_json

    if args.explain_out and not args.explain:
        raise UserError("--explain-out needs --explain")
    if args.autotune and not args.compile:
        raise UserError("--autotune needs --compile")
    options = DecodeOptions(args.beam, args.length_penalty, args.sample, args.temperature,
                            args.top_k, args.top_p, args.seed, args.max_len,
                            args.explain_top if args.explain else 0, args.compile,
                            args.autotune)
    ckpt = load_checkpoint(args.checkpoint)
    if not args.compile:  # the compiler packs frozen weights itself
        prepack(ckpt.model)  # inference only: faster linears, same results
    lines = args.text or [line.rstrip("\r\n") for line in sys.stdin]
    results = translate_lines(ckpt, lines, options, args.batch_size)
    for r in results:
        print(r.text)
        for s in r.steps or []:
            alts = "  ".join(f"{a['token']!r} {a['logprob']:.3f}" for a in s["alternatives"])
            print(f"  step {s['step']}: {s['token']!r} {s['logprob']:.3f}  | {alts}")
    if args.explain_out:
        write_json(results, args.explain_out)
    return 0


# --- eval ---
def add_eval(sub) -> None:
    """``decoderkit eval``: the subcommand with its checkpoint, data and device flags."""
    p = sub.add_parser("eval", help="evaluate a checkpoint on held-out pairs",
                       description="Loss, token accuracy, exact match, BLEU and chrF of a "
                       "checkpoint: on its own run's held-out pairs, or on a TSV you give.")
    p.add_argument("--checkpoint", metavar="DIR", required=True, help="checkpoint directory")
    p.add_argument("--data", metavar="TSV", help="score these 'source<TAB>target' pairs instead")
    p.add_argument("--batch-size", type=int, default=128, help="sentences per batch")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                   help="where to run: auto = CUDA when present, else CPU")
    p.set_defaults(func=_eval)


def _eval(args: argparse.Namespace) -> int:
    """Score a checkpoint on ``--data`` or its run's held-out pairs, print one line; exit 0."""
    from .checkpoint import load_checkpoint
    from .evaluation import evaluate

    ckpt = load_checkpoint(args.checkpoint, distributed.setup(args.device).device)
    if args.data:
        texts = read_tsv(args.data)
    else:
        if "data" not in ckpt.meta:
            raise UserError(f"{args.checkpoint} records no training data; pass --data")
        texts = prepare_data(DataConfig(**ckpt.meta["data"]),
                             (ckpt.src_tokenizer, ckpt.tgt_tokenizer)).valid_texts
    pairs = [(ckpt.src_tokenizer.encode(s), ckpt.tgt_tokenizer.encode(t)) for s, t in texts]
    longest = max(len(t) for _, t in pairs)
    metrics, _ = evaluate(ckpt.model, pairs, [t for _, t in texts], ckpt.tgt_tokenizer,
                          batch_size=args.batch_size,
                          max_len=min(ckpt.config.max_len - 1, 2 * longest + 8))
    print(f"{len(pairs)} pairs | {metrics.line()}")
    return 0


# --- params, figures, check, bench ---
def add_params(sub) -> None:
    """``decoderkit params``: the parameter table of a config or checkpoint."""
    p = sub.add_parser("params", help="parameter-count table per component",
                       description="Parameters per component for any config, shared weights "
                       "counted once. Defaults: the paper's base model with a 37,000-word "
                       "vocabulary (seed 000's example).")
    p.add_argument("--checkpoint", metavar="DIR", help="count the model config saved in DIR "
                   "(the other flags are then ignored)")
    p.add_argument("--src-vocab", type=int, default=37000, help="source vocabulary size")
    p.add_argument("--tgt-vocab", type=int, default=37000, help="target vocabulary size")
    add_shape_flags(p, layers=6, d_model=512, heads=8, d_ff=2048)
    p.add_argument("--no-bias", action="store_true", help="no biases in attention and FFN")
    p.add_argument("--layer-norm", choices=("standard", "annotated"), default="standard",
                   help="layer-norm variant")
    p.add_argument("--tie-embeddings", action="store_true",
                   help="share source and target embeddings (equal vocabularies)")
    p.add_argument("--tie-generator", action="store_true",
                   help="generator weight = target embedding weight")
    p.set_defaults(func=_params)


def _params(args: argparse.Namespace) -> int:
    import torch

    from .model import EncoderDecoder, ModelConfig
    from .params import (
        count_parameters,
        decoder_layer_parameters,
        encoder_layer_parameters,
        parameter_breakdown,
    )

    if args.checkpoint:
        config = ModelConfig.load(_checkpoint_dir(args.checkpoint) / "config.json")
    else:
        config = ModelConfig(args.src_vocab, args.tgt_vocab, args.layers, args.d_model,
                             args.heads, args.d_ff, bias=not args.no_bias,
                             norm_first=args.norm_first, layer_norm=args.layer_norm,
                             tie_embeddings=args.tie_embeddings, tie_generator=args.tie_generator)
    with torch.device("meta"):  # shapes only: no memory, no initialisation
        model = EncoderDecoder(config)
    c = config
    print(f"N={c.n_layers}, d_model={c.d_model}, heads={c.n_heads}, d_ff={c.d_ff}, "
          f"vocab {c.src_vocab:,} -> {c.tgt_vocab:,}, bias={c.bias}, "
          f"{'pre' if c.norm_first else 'post'}-norm, {c.layer_norm} LayerNorm")
    gen = model.generator.proj
    out = ("shared with the target embedding" if c.tie_generator
           else f"{gen.weight.numel():,} + {gen.bias.numel():,} (d x V + bias)")
    d, f = c.d_model, c.d_ff
    enc = ("(4d^2+4d) + (2df+f+d) + 4d" if c.bias else "4d^2 + 2df + 4d",
           encoder_layer_parameters(d, f, c.bias))
    dec = ("2(4d^2+4d) + (2df+f+d) + 6d" if c.bias else "8d^2 + 2df + 6d",
           decoder_layer_parameters(d, f, c.bias))
    rows = [*parameter_breakdown(model).items(), ("", None),
            ("per encoder layer", count_parameters(model.encoder.layers[0]),
             f"{enc[0]} = {enc[1]:,}"),
            ("per decoder layer", count_parameters(model.decoder.layers[0]),
             f"{dec[0]} = {dec[1]:,}"),
            (f"decoder stack ({c.n_layers} layers)", count_parameters(model.decoder)),
            ("output layer", out)]
    for name, n, *formula in rows:
        if n is not None:
            print(f"{name:<26}{n if isinstance(n, str) else f'{n:>14,}'}  {''.join(formula)}"
                  .rstrip())
        else:
            print()
    print("(each shared tensor counted once, in the first component holding it)")
    return 0


def _checkpoint_dir(path: str):
    from pathlib import Path

    directory = Path(path)
    if not (directory / "config.json").is_file():
        raise UserError(f"--checkpoint {path}: no config.json there (not a checkpoint directory)")
    return directory


def add_figures(sub) -> None:
    """``decoderkit figures``: the seed figures, and attention maps from a checkpoint."""
    p = sub.add_parser("figures", help="draw the seed figures and attention maps",
                       description="Draw the seed figures (PNG and SVG) into --out; with "
                       "--checkpoint also the self- and cross-attention maps of one translation.")
    p.add_argument("--out", required=True, metavar="DIR", help="directory to write into")
    p.add_argument("--checkpoint", metavar="DIR", help="trained checkpoint for attention maps")
    p.add_argument("--text", default="29 Nov 2026",
                   help="source sentence for the attention maps (default: %(default)s)")
    p.add_argument("--only", nargs="+", metavar="NAME", help="draw only these figures "
                   "(causal_attention positional_encoding relative_offset norm_axes "
                   "label_smoothing warmup attention)")
    p.add_argument("--format", nargs="+", choices=("png", "svg"), default=["png", "svg"],
                   help="file formats (default: png svg)")
    p.add_argument("--dpi", type=int, default=100, help="PNG resolution (default: %(default)s)")
    p.set_defaults(func=_figures)


def _figures(args: argparse.Namespace) -> int:
    from . import plots

    names = args.only or [*plots.FIGURES, *(["attention"] if args.checkpoint else [])]
    unknown = sorted(set(names) - {*plots.FIGURES, "attention"})
    if unknown:
        raise UserError(f"--only: unknown figure(s) {unknown}; choose from "
                        f"{[*plots.FIGURES, 'attention']}")
    if "attention" in names and not args.checkpoint:
        raise UserError("the attention figure needs --checkpoint DIR")
    if args.dpi < 10:
        raise UserError(f"--dpi must be >= 10, got {args.dpi}")
    paths = [p for name in names if name != "attention"
             for p in plots.save_figure(plots.FIGURES[name](), args.out, name, args.format,
                                        args.dpi)]
    if "attention" in names:
        paths += plots.checkpoint_attention(_checkpoint_dir(args.checkpoint), args.text,
                                            args.out, args.format, args.dpi)
    for path in paths:
        print(path)
    return 0


def add_check(sub) -> None:
    """``decoderkit check``: the conformance report (exit 1 on any failing row)."""
    p = sub.add_parser("check", help="conformance report: every numeric claim of the seeds",
                       description="Recompute every numeric claim of the seeds and the "
                       "self-consistency checks; print claim, expected, ours, result. Exit "
                       "status 1 if any row fails.")
    p.add_argument("--source", nargs="+", choices=("000", "001", "002", "004", "self"),
                   help="only rows from these seeds ('self': consistency checks)")
    p.add_argument("--problems", action="store_true", help="print only rows that did not pass")
    p.set_defaults(func=_check)


def _check(args: argparse.Namespace) -> int:
    from . import conformance

    wanted = args.source or ("000", "001", "002", "004", "self")
    rows = conformance.run_checks([c for c in conformance.all_checks()
                                   if conformance.check_source(c) in wanted])
    shown = [r for r in rows if r.status != "pass" or not args.problems]
    print(conformance.format_table(shown) if shown else f"all {len(rows)} rows pass")
    return 1 if any(r.status == "FAIL" for r in rows) else 0


def benchmarks_dir():
    """The ``benchmarks/`` folder of the source checkout this package runs from."""
    from pathlib import Path

    return Path(__file__).resolve().parents[2] / "benchmarks"


def add_bench(sub) -> None:
    """``decoderkit bench``: run a script of ``benchmarks/`` with this Python."""
    p = sub.add_parser("bench", help="run a benchmark script from benchmarks/",
                       description="Run benchmarks/NAME.py with this Python; arguments after "
                       "NAME are passed to the script (e.g. 'decoderkit bench generate --quick').")
    p.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    p.add_argument("name", nargs="?", help="benchmark name (see --list)")
    p.add_argument("script_args", nargs=argparse.REMAINDER, metavar="...",
                   help="arguments passed to the script")
    p.set_defaults(func=_bench)


def _bench(args: argparse.Namespace) -> int:
    import ast
    import subprocess

    folder = benchmarks_dir()
    scripts = {p.stem: p for p in sorted(folder.glob("*.py"))} if folder.is_dir() else {}
    if not scripts:
        raise UserError(f"no benchmark scripts in {folder} (run from a source checkout)")
    if args.list:
        for name, path in scripts.items():
            doc = ast.get_docstring(ast.parse(path.read_text())) or ""
            print(f"{name:<16}{doc.splitlines()[0] if doc else ''}")
        return 0
    if args.name not in scripts:
        what = "name a benchmark" if args.name is None else f"unknown benchmark {args.name!r}"
        raise UserError(f"{what}; choose from {list(scripts)} (or --list)")
    return subprocess.call([sys.executable, str(scripts[args.name]), *args.script_args])


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage mistake is one line (with a pointer to --help) and exit 2."""

    def error(self, message: str):
        """Print ``prog: error: message (see prog --help)`` and exit 2."""
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """The ``decoderkit`` parser with every subcommand."""
    parser = _Parser(
        prog="decoderkit",
        description="The encoder-decoder Transformer, exact to the textbook formulas.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in (add_train, add_translate, add_eval, add_params, add_figures, add_check,
                add_bench):
        add(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status (0 ok, 1 failed check, 2 user error, 130 ^C)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as stop:  # --help (0) or a usage error (2), already printed
        return stop.code if isinstance(stop.code, int) else 2
    try:
        return int(args.func(args) or 0)
    except (UserError, ValueError, TypeError, OSError) as err:
        print(f"decoderkit {args.command}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"decoderkit {args.command}: interrupted", file=sys.stderr)
        return 130
