"""``decoderkit lm``: decoder-only language models: train, sample, chat, eval, data, export.

One module per subcommand, each with ``add(lm)`` (its parser under ``lm``) and ``run(args)``.
"""

from __future__ import annotations

from decoderkit.cli.lm import (
    chat,
    classify,
    data,
    evaluate,
    export,
    finetune,
    sample,
    train,
    tune,
)

# evaluate: lm eval
SUBCOMMANDS = (train, sample, chat, evaluate, data, export, finetune, tune, classify)


def add(sub) -> None:
    """The ``lm`` command and its subcommands."""
    p = sub.add_parser("lm", help="decoder-only language models (GPT): train, sample, chat, "
                       "eval, data, export, finetune, tune, classify",
                       description="Decoder-only language models built from the same blocks: "
                       "train one on your text, sample from it or from GPT-2 / nanoGPT "
                       "weights, evaluate, export to transformers; fine-tune one to classify "
                       "text (GPT-1's recipe) and label texts with it.")
    lm = p.add_subparsers(dest="lm_command", required=True, metavar="LM_COMMAND",
                          help="what to do")
    for command in SUBCOMMANDS:
        command.add(lm)
