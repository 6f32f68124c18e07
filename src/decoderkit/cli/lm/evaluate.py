"""``decoderkit lm eval``: mean next-token loss and perplexity on a text file (and, for a
tokenizer that is not one token a character, the loss per character), or a fine-tuned
classifier's accuracy and macro-F1 on a labelled TSV file."""

from __future__ import annotations

import argparse

from decoderkit.base.checks import size
from decoderkit.base.errors import UsageError
from decoderkit.cli.args import integer, pathname, ranged
from decoderkit.cli.lm.common import CHECKPOINT_HELP, add_adapter, load
from decoderkit.cli.shape import MAX_POSITIONS, add_threads, set_threads


def add(lm) -> None:
    """The ``lm eval`` parser: checkpoint, text, block and batch size."""
    p = lm.add_parser("eval", help="loss and perplexity on a text file (a classifier: "
                      "accuracy and macro-F1 on a TSV file)",
                      description="--text: mean next-token loss and perplexity of a model on "
                      "all of a text file, read as consecutive blocks of the model's context, "
                      "its ids as transformers' tokenizer(text) gives them (a Llama "
                      "tokenizer's BOS first, named in the output; GPT-2's adds none). "
                      "--data: accuracy, macro-F1 and loss of a classifier (lm finetune's) on "
                      "text TAB label lines. --choices: accuracy on prompt / completion questions, "
                      "each answered by the likeliest completion the file has.")
    p.add_argument("--checkpoint", required=True, metavar="DIR", type=pathname,
                   help=CHECKPOINT_HELP + "; with --data, a classifier (lm finetune)")
    add_adapter(p)
    given = p.add_mutually_exclusive_group(required=True)
    given.add_argument("--text", metavar="FILE", type=pathname, help="a UTF-8 text file")
    given.add_argument("--data", metavar="TSV", type=pathname,
                       help="labelled examples (a classifier)")
    given.add_argument("--choices", metavar="JSONL", type=pathname,
                       help="prompt / completion questions (lm data shakespeare-genres "
                       "--questions): the accuracy of the likeliest of the file's completions")
    p.add_argument("--block-size", type=integer(1, MAX_POSITIONS),
                   help="tokens per block (default: the model's context length)")
    p.add_argument("--batch-size", type=ranged(size()), default=32,
                   help="blocks (--data: examples) per batch")
    add_threads(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Loss and perplexity over the whole file (--text), or classification scores (--data)."""
    if args.data is not None:
        return _classification(args)
    if args.choices is not None:
        return _choices(args)
    import torch

    from decoderkit.training.lm.data import eval_blocks, read_text
    from decoderkit.training.lm.objective import evaluate_lm, per_character

    set_threads(args)
    model, tokenizer = load(args.checkpoint, instead="decoderkit eval", adapter=args.adapter)
    context = model.config.max_len
    block = args.block_size or context
    if block > context:
        raise UsageError(f"--block-size {block} exceeds the model's context length {context}")
    text = read_text(args.text, "--text")  # a regular file (not /dev/zero), UTF-8
    try:
        plain, ids = tokenizer.encode(text), tokenizer.encode_prompt(text)  # ids: with BOS
    except UsageError as err:
        raise UsageError(f"{args.text}: {err}") from None
    if len(ids) < block + 1:
        raise UsageError(f"{args.text}: {len(ids)} tokens, fewer than block size + 1 = "
                         f"{block + 1}")
    stream = torch.tensor(ids, dtype=torch.long)
    metrics = evaluate_lm(model, eval_blocks([stream], block), batch_size=args.batch_size)
    print(f"loss {metrics.loss:.4f} | perplexity {metrics.shown_perplexity} | "
          f"{metrics.tokens:,} tokens in blocks of {block}")
    if len(ids) != len(plain):
        print(f"the text scored as transformers' tokenizer(text) encodes it: "
              f"{_added(tokenizer, plain, ids)} (the tokenizer's own)")
    if len(plain) != len(text):  # not one token a character: the loss per character too
        print(f"loss per character {per_character(metrics.loss, len(plain), len(text)):.4f} "
              f"({len(text):,} characters, {len(text) / len(plain):.2f} a token)")
    return 0


def _added(tokenizer, plain: list[int], ids: list[int]) -> str:
    """What the tokenizer adds around a text's ``plain`` ids in its prompt ``ids`` ("<s>
    first"), named by their tokens."""
    at = next((k for k in range(len(ids) - len(plain) + 1) if ids[k:k + len(plain)] == plain),
              None)
    if at is None:  # a post-processor that changes the text's own ids too
        return f"{len(ids) - len(plain):+} tokens"
    before, after = ids[:at], ids[at + len(plain):]
    named = [f"{' '.join(tokenizer.hf.id_to_token(i) for i in part)} {where}"
             for part, where in ((before, "first"), (after, "last")) if part]
    return " and ".join(named)


def _classification(args: argparse.Namespace) -> int:
    """Accuracy, macro-F1 and loss of a classifier on every line of --data."""
    from decoderkit.cli.lm.common import load_classifier
    from decoderkit.training.lm.finetune import examples_of
    from decoderkit.training.lm.labelled import evaluate_classifier, read_tsv

    if args.block_size is not None:
        raise UsageError("--block-size applies to --text, not --data")
    set_threads(args)
    data = read_tsv(args.data)
    model, tokenizer = load_classifier(args.checkpoint)
    examples = examples_of(data, tokenizer, model)
    metrics = evaluate_classifier(model, examples, batch_size=args.batch_size)
    cut = f" ({examples.cut} cut to the context)" if examples.cut else ""
    print(f"accuracy {metrics.accuracy:.4f} | macro-F1 {metrics.macro_f1:.4f} | "
          f"loss {metrics.loss:.4f} | {metrics.examples:,} examples{cut}")
    return 0


def _choices(args: argparse.Namespace) -> int:
    """Accuracy on --choices' questions, each answered by its likeliest of their completions."""
    from decoderkit.training.lm.genre_questions import choice_accuracy, read_questions

    if args.block_size is not None:
        raise UsageError("--block-size applies to --text, not --choices")
    set_threads(args)
    examples = read_questions(args.choices)
    model, tokenizer = load(args.checkpoint, instead="decoderkit eval", adapter=args.adapter)
    answers = sorted({e["completion"] for e in examples})
    accuracy = choice_accuracy(model, tokenizer, examples, answers, args.batch_size)
    commonest = max(sum(e["completion"] == a for e in examples) for a in answers)
    print(f"accuracy {accuracy:.4f} | {len(examples):,} questions, answers "
          + ", ".join(repr(a) for a in answers)
          + f" | always the commonest answer: {commonest / len(examples):.4f}")
    return 0
