"""``decoderkit translate``: greedy, beam or sampled outputs of a checkpoint."""

from __future__ import annotations

import argparse
import sys

from decoderkit.base.checks import LENGTH_PENALTY, size
from decoderkit.base.errors import UsageError
from decoderkit.base.files import check_output_file
from decoderkit.base.text import decode_line, split_lines
from decoderkit.cli.args import integer, pathname, ranged, text
from decoderkit.cli.engines import (add_compile_flags, add_engine_flags, open_engine,
                                    use_compile_flags)
from decoderkit.cli.shape import MAX_POSITIONS, add_sampling_flags
from decoderkit.generation.seq2seq.workers import check_workers

PARTIAL = 1  # exit status when some lines could not be translated (the others were)


def add(sub) -> None:
    """The subcommand with its search, sampling, explain and speed flags."""
    p = sub.add_parser("translate", help="translate text with a trained checkpoint",
                       description="Translate each TEXT argument, or else each line of stdin; "
                       "one output line per input line. A line that cannot be translated (not "
                       "UTF-8, too long for the model) gives an empty output line and a message "
                       "on stderr naming its line number; the others are translated and the "
                       f"exit status is then {PARTIAL}. Characters the model never saw in "
                       "training are named in one warning on stderr.")
    p.add_argument("text", nargs="*", metavar="TEXT", type=text,
                   help="text to translate (none: stdin)")
    p.add_argument("--checkpoint", metavar="DIR", type=pathname, help="a checkpoint directory")
    p.add_argument("--beam", type=integer(1, 1000), metavar="N",
                   help="beam size (1: greedy); default: a Hugging Face directory's num_beams "
                   "(generation_config.json, else config.json), else 1")
    p.add_argument("--length-penalty", type=ranged(LENGTH_PENALTY),
                   help="beam ranking: log p / length ** this (0: plain log p); default: a "
                   "Hugging Face directory's length_penalty, else 1")
    p.add_argument("--beam-rule", choices=("stay", "retire"),
                   help="stay: an ended hypothesis keeps its place in the beam (ours); retire: "
                   "it leaves for a list of finished ones and the beam is refilled (Hugging "
                   "Face's generate, Marian); default: the checkpoint's (retire for a Marian "
                   "model)")
    p.add_argument("--allow-unk", action="store_true",
                   help="let <unk> be chosen where the checkpoint bans it (a Marian .npz model: "
                   "Marian's translator bans it unless --allow-unk)")
    p.add_argument("--sample", action="store_true", help="sample instead of greedy/beam")
    add_sampling_flags(p)
    p.add_argument("--max-len", type=integer(1, MAX_POSITIONS),
                   help="most tokens per output; default: a Hugging Face directory's "
                   "max_length - 1, else 2 x source + 16 (a directory whose forced_eos_token_id "
                   "is EOS ends an output that reaches the bound with EOS, as generate does)")
    p.add_argument("--batch-size", type=ranged(size()), default=32, help="lines decoded together")
    p.add_argument("--workers", type=integer(1, 64), default=1, metavar="N",
                   help="batches decoded at once, each on its own thread, the CPU threads "
                   "shared among them (decoderkit, ctranslate2): 2 on 2 cores is faster for a "
                   "small model's beam search")
    p.add_argument("--explain", action="store_true",
                   help="print each step's top alternatives with log-probabilities")
    p.add_argument("--explain-top", type=ranged(size()), default=5, metavar="K",
                   help="alternatives shown")
    p.add_argument("--explain-out", metavar="FILE.json", type=pathname,
                   help="with --explain: write every step, attention weights included, as JSON "
                   '({"written_by": ..., "results": [one per line]}); an existing file is '
                   "replaced only if an earlier --explain-out wrote it")
    add_compile_flags(p)
    add_engine_flags(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Translate the given lines (or stdin), print one line each (and the steps when asked);
    0, or ``PARTIAL`` if some lines could not be translated."""
    from decoderkit.nn.packing import prepack
    from decoderkit.generation.seq2seq.settings import settled_options
    from decoderkit.generation.seq2seq.translate import JSON_COMMAND, translate_lines, write_json
    from decoderkit.generation.settings import FLAGS, Source
    from decoderkit.base.families import SEQ2SEQ
    from decoderkit.interop.checkpoints import load_checkpoint

    check_flags(args, JSON_COMMAND)
    export = open_engine(args, workers=args.workers)
    engine = (load_checkpoint(args.checkpoint, families=(SEQ2SEQ,)) if export is None
              else export)
    check_max_len(args.max_len, engine.config)  # every engine: no decoding past its positions
    flags = dict(beam=args.beam, length_penalty=args.length_penalty, max_len=args.max_len,
                 sample=args.sample or None, temperature=args.temperature, top_k=args.top_k,
                 top_p=args.top_p, seed=args.seed, explain=args.explain_top if args.explain
                 else 0, compile=args.compile, autotune=args.autotune,
                 int8=args.int8 and export is None, beam_rule=args.beam_rule,
                 ban_unk=False if args.allow_unk else None)
    options, _ = settled_options(  # where a flag is not given: the directory's own settings
        [Source(FLAGS, flags)], getattr(engine, "meta", {}))
    lines, errors = read_input(args.text)
    if export is None and not args.compile and not args.int8:  # they replace packed weights
        prepack(engine.model)  # inference only: faster linears, same results
    good = [i for i in range(len(lines)) if i not in errors]
    unknown = sorted({c for i in good for c in engine.src_tokenizer.unknown_characters(lines[i])})
    if unknown:
        print(f"warning: {len(unknown)} character(s) the model never saw in training, read as "
              f"<unk>: {' '.join(map(repr, unknown))}", file=sys.stderr)
    todo = [lines[i] for i in good]
    translated = (translate_lines(engine, todo, options, args.batch_size, args.workers)
                  if export is None
                  else export.translate_lines(todo, options, args.batch_size))
    results = dict(zip(good, translated, strict=True))
    errors.update({i: r.error for i, r in results.items() if r.error})  # e.g. too long
    for i in range(len(lines)):
        if i in errors:
            print()
            print(f"line {i + 1}: {errors[i]}", file=sys.stderr)
            continue
        r = results[i]
        print(r.text)
        for s in r.steps or []:
            alts = "  ".join(f"{a['token']!r} {a['logprob']:.3f}" for a in s["alternatives"])
            print(f"  step {s['step']}: {s['token']!r} {s['logprob']:.3f}  | {alts}")
    if args.explain_out is not None:
        write_json([results[i] for i in good], args.explain_out)
    if errors:
        print(f"{len(errors)} of {len(lines)} line(s) not translated", file=sys.stderr)
    return PARTIAL if errors else 0


def check_flags(args: argparse.Namespace, json_command: str) -> None:
    """The flags that need others, before any work (an --explain-out that is a user's file is
    refused, never written)."""
    if args.explain_out is not None and not args.explain:
        raise UsageError("--explain-out needs --explain")
    if args.explain_out is not None:
        check_output_file(args.explain_out, "--explain-out", json_command)
    use_compile_flags(args)
    check_workers(args.workers, args.compile, ("--workers", "--compile"))


def check_max_len(max_len: int | None, config) -> None:
    """--max-len must fit the model's positions (``config.max_len``), in every engine (the
    CTranslate2 one would fail inside its decoder); None: each line's own default."""
    if max_len is not None and max_len > config.max_len:
        raise UsageError(f"--max-len {max_len} is more than the model's {config.max_len} "
                         f"positions (its max_len): give at most {config.max_len}")


def read_input(texts: list[str]) -> tuple[list[str], dict[int, str]]:
    """The TEXT arguments, or else stdin's lines read as bytes (newlines only), and the error
    of each line that cannot be used (index -> message), e.g. one that is not UTF-8."""
    if texts:
        return list(texts), {}
    lines, errors = [], {}
    for i, raw in enumerate(split_lines(sys.stdin.buffer.read())):
        try:
            lines.append(decode_line(raw, first=i == 0))
        except UsageError as err:
            lines.append("")
            errors[i] = str(err)
    return lines, errors
