"""``decoderkit lm tune``: teach a pretrained LM a task on its own examples, by LoRA (a PEFT
adapter) or with ``--full`` every weight."""

from __future__ import annotations

import argparse

from decoderkit.base.checks import FRACTION, POSITIVE
from decoderkit.base.errors import UsageError
from decoderkit.cli.args import ranged, text
from decoderkit.cli.lm.common import open_lm
from decoderkit.cli.lm.tune_flags import (
    SHARED_ROWS,
    add_config_flags,
    add_tuning_flags,
    check_inputs,
)
from decoderkit.cli.resume import on_resume
from decoderkit.cli.shape import set_threads
from decoderkit.nn.lm.lora import check_lora
from decoderkit.nn.lora import ALL_LINEAR, RANK, LoRAConfig
from decoderkit.training.distributed import say
from decoderkit.training.lm.tune import TUNE_RANGES, TuneConfig
from decoderkit.training.lm.tune_data import LOSSES

COMMAND = "decoderkit lm tune"


def add(lm) -> None:
    """The ``lm tune`` parser: base, data, run directory, LoRA's and the loop's flags."""
    p = lm.add_parser("tune", help="tune a pretrained LM on your examples (LoRA, or --full)",
                      description="Tune a pretrained LM on chat JSONL ({\"messages\": [...]} a "
                      "line, rendered by the model's own chat template; the loss on the "
                      "assistant's tokens by default), prompt/completion JSONL (the loss on "
                      "the completion) or plain text. LoRA by default: --out is a PEFT adapter "
                      "(adapter_config.json, adapter_model.safetensors) that peft, vLLM and "
                      "decoderkit's --adapter read; --full trains every weight into an lm "
                      "train run directory. --out holds the best validated state.")
    add_tuning_flags(p, base="the base model", data="FILE",
                     examples="the examples (.jsonl chat or prompt/completion, or text)",
                     valid="held-out examples (default: every tenth of --data)",
                     resume="the same base, data and adapter")
    p.add_argument("--loss", choices=LOSSES, default="assistant",
                   help="chat: the tokens that carry the loss: the assistant's turns "
                   "(default), all, or the last assistant turn")
    a = p.add_argument_group("LoRA (defaults: litgpt's r 8, alpha 16)")
    d = LoRAConfig()
    a.add_argument("--rank", type=ranged(RANK), default=d.r, help="r (default %(default)s)")
    a.add_argument("--alpha", type=ranged(POSITIVE), default=d.alpha,
                   help="the update's scale is alpha / r (default %(default)s)")
    a.add_argument("--dropout", type=ranged(FRACTION), default=0.05,
                   help="dropout on the adapters' input (default %(default)s)")
    a.add_argument("--targets", type=text, metavar="NAMES",
                   help=f"comma-separated Hugging Face module names (q_proj,v_proj; c_attn) "
                   f"or {ALL_LINEAR} (default: PEFT's for the architecture)")
    a.add_argument("--rslora", action="store_true", help="scale alpha / sqrt(r) (rsLoRA)")
    a.add_argument("--trainable-tokens", type=text, metavar="IDS",
                   help="comma-separated token ids whose embedding rows (and a tied head's) "
                   "are trained beside the adapters: PEFT's trainable_token_indices")
    a.add_argument("--full", action="store_true",
                   help="no adapter: train every weight (the LoRA flags then stay unused)")
    t = p.add_argument_group("training")
    add_config_flags(t, TuneConfig(), TUNE_RANGES, (
        *SHARED_ROWS,
        (("--min-lr",), "min_lr", "final rate of the cosine decay (default %(default)s)"),
        (("--warmup",), "warmup", "linear warm-up steps (default %(default)s)"),
        (("--max-steps",), "max_steps", "optimiser steps (default %(default)s)"),
        (("--valid-every",), "valid_every", "steps per validation (default %(default)s)"),
        (("--patience",), "patience", "validations without a lower loss before stopping "
         "(0: never)"),
        (("--seed",), "seed", "the adapters' initialisation, dropout and batch order")))
    p.set_defaults(run=run)


def lora_config(args: argparse.Namespace) -> LoRAConfig | None:
    """The adapter the flags ask for (None: --full)."""
    if args.full:
        return None
    targets = None if args.targets is None else tuple(
        t.strip() for t in args.targets.split(","))
    if targets is not None and not all(targets):
        raise UsageError(f"--targets: an empty name in {args.targets!r}")
    return LoRAConfig(r=args.rank, alpha=args.alpha, dropout=args.dropout, targets=targets,
                      rslora=args.rslora)


def trainable_tokens(args: argparse.Namespace, vocab: int) -> list[int]:
    """--trainable-tokens' ids, each checked in [0, ``vocab``) and given once ([]: none)."""
    if args.trainable_tokens is None:
        return []
    parts = [t.strip() for t in args.trainable_tokens.split(",")]
    if not all(t.isdigit() for t in parts):
        raise UsageError(f"--trainable-tokens: expected comma-separated token ids, got "
                         f"{args.trainable_tokens!r}")
    ids = [int(t) for t in parts]
    if any(i >= vocab for i in ids) or len(set(ids)) < len(ids):
        raise UsageError(f"--trainable-tokens: expected distinct ids in [0, {vocab}), got "
                         f"{args.trainable_tokens!r}")
    if args.full:
        raise UsageError("--trainable-tokens: --full trains every row already")
    return ids


def run(args: argparse.Namespace) -> int:
    """Open the base through the opener, read the examples, ``tune``."""
    from decoderkit.interop.lm.tune_run import (ADAPTER_RUN_FILES, tune, tune_data,
                                                with_end_of_text)
    from decoderkit.text.lm.tokenizer import END_OF_TEXT
    from decoderkit.training.lm.checkpoint import FILES
    from decoderkit.training.rundir import check_out

    args, commands = on_resume(args, args.out, "decoderkit lm train" if args.full else COMMAND)
    set_threads(args)
    cfg = TuneConfig(batch_size=args.batch_size, accum=args.accum, max_steps=args.max_steps,
                     time_limit=args.time_limit, lr=args.lr, min_lr=args.min_lr,
                     warmup=args.warmup, weight_decay=args.weight_decay,
                     clip=args.clip or None, valid_every=args.valid_every,
                     patience=args.patience, loss=args.loss, seed=args.seed)
    lora = lora_config(args)
    check_inputs(args)
    check_out(args.out, resume=args.resume, overwrite=args.overwrite,
              files=FILES if lora is None else ADAPTER_RUN_FILES)
    base, new_tokens = with_end_of_text(open_lm(args.checkpoint, "decoderkit train"))
    if lora is not None:
        check_lora(base.config, lora)  # before the data is read
    trained = [i for i in trainable_tokens(args, base.model.config.vocab_size)
               if i not in new_tokens]
    if new_tokens:
        say(f"the base has no end-of-text token: {END_OF_TEXT} added as id {new_tokens[0]} "
            "(trained, and saved with the run's tokenizer)")
    data = tune_data(base, base.chat, args.data, args.valid, cfg.loss)
    say(f"{len(data.train):,} training examples ({data.kind}), {len(data.valid):,} held out; "
        f"{'every weight' if lora is None else f'LoRA r={lora.r} alpha={lora.alpha:g}'}")
    tune(base, data, cfg, lora, args.out, resume=args.resume, overwrite=args.overwrite,
         device=args.device, progress=not args.quiet, commands=commands,
         new_tokens=new_tokens + trained)
    return 0
