"""LoRA beside full fine-tuning on ``make tune-demo``'s data: the demo's pretrained Llama-block
Shakespeare (runs/shakespeare-llama) tuned by ``lm tune`` twice on its genre questions
(runs/genre-questions/train.jsonl), LoRA (the demo's recipe: r 8, alpha 16 on PEFT's default
targets, lr 1e-3) and ``--full`` (every weight, lr 1e-4 as litgpt's and torchtune's full
recipes use an order below LoRA's), the same steps, batch, warm-up, seed and threads. Run
``make tune-demo`` first (it makes the base and the data).

Printed for each: the lowest validation loss of the run (``lm tune``'s own: every tenth of the
training questions, per trained token), the loss on the six held-out plays' questions
(test.jsonl, the same per-token loss), split into the answer's first token (the choice) and
the tokens after it (the rest of the word and the end of text), their accuracy (``lm eval
--choices``' score), and the share of the parameters trained (of the tuned model's: ``lm
tune`` gives a base without an end-of-text token one, a row LoRA trains beside its adapters);
then LoRA / full for each loss (the goal: at most 1.05) and the untuned model's accuracy.
Bounded by steps: the figures do not depend on the load (each run's seconds, which do, are
printed beside them).

The LoRA recipe is ``lm tune``'s flags (--rank, --alpha, --targets, --rslora, --dropout as
--lora-dropout, --lora-lr, --trainable-tokens: rows of the embedding and tied head trained, as
PEFT's trainable_token_indices); ``--full-run DIR`` takes the full tuning of an earlier run (its
``--keep DIR``/full, of the same steps) instead of training it again, for a sweep of LoRA
recipes against one full run.

    .venv/bin/python benchmarks/tune_quality.py [--base runs/shakespeare-llama]
        [--data runs/genre-questions] [--steps 300] [--lora-lr 1e-3] [--full-lr 1e-4]
        [--rank 8] [--alpha 16] [--targets NAMES] [--rslora] [--lora-dropout 0.05]
        [--trainable-tokens IDS]
        [--threads 2] [--keep DIR] [--full-run DIR]
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # idle workers sleep: a shared CPU

import argparse  # noqa: E402
import json  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402

COMMON = ["--warmup", "20", "--batch-size", "16", "--valid-every", "100", "--seed", "0",
          "--quiet"]  # the demo's lm tune flags that both runs share


def tune(args, out: Path, flags: list[str]) -> tuple[float, float]:
    """Run ``lm tune`` into ``out``: (its lowest validation loss (meta.json's history), its
    seconds)."""
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "decoderkit", "lm", "tune", "--checkpoint", args.base,
                    "--data", str(Path(args.data) / "train.jsonl"), "--out", str(out),
                    "--max-steps", str(args.steps), "--threads", str(args.threads), *COMMON,
                    *flags], check=True)
    return validated(out, args.steps), time.monotonic() - started


def validated(out: Path, steps: int) -> float:
    """The lowest validation loss of the run in ``out``, refused unless it ran ``steps``."""
    meta = json.loads((out / "meta.json").read_text())
    if meta["train"]["max_steps"] != steps:
        sys.exit(f"{out} was tuned {meta['train']['max_steps']} steps, not --steps {steps}")
    return min(h["loss"] for h in meta["history"])


def lora_flags(args) -> list[str]:
    """The LoRA recipe's ``lm tune`` flags."""
    return ["--rank", str(args.rank), "--alpha", str(args.alpha), "--lr", args.lora_lr,
            "--dropout", str(args.lora_dropout), *(["--targets", args.targets]
                                                   if args.targets else []),
            *(["--rslora"] if args.rslora else []),
            *(["--trainable-tokens", args.trainable_tokens] if args.trainable_tokens else []),
            "--overwrite"]


def split_loss(model, examples) -> tuple[float, float]:
    """(the mean loss on each answer's first trained token, the choice; the mean loss per
    token on the trained tokens after it)."""
    import torch.nn.functional as F
    from decoderkit.training.lm.tune_data import IGNORE, collate

    sums, counts = [0.0, 0.0], [0, 0]
    model.eval()
    with torch.no_grad():
        for start in range(0, len(examples), 32):
            batch = collate(examples[start:start + 32])
            losses = F.cross_entropy(model(batch.ids).transpose(1, 2).float(), batch.labels,
                                     ignore_index=IGNORE, reduction="none")  # (B, T)
            trained = batch.labels != IGNORE
            first = trained & (trained.long().cumsum(dim=1) == 1)
            for k, where in enumerate((first, trained & ~first)):
                sums[k] += float(losses[where].sum())
                counts[k] += int(where.sum())
    return sums[0] / counts[0], sums[1] / max(counts[1], 1)


def held_out(args, checkpoint: str, adapter: str | None) -> dict:
    """Loss per trained token (all, the choice's, the rest's) and choice accuracy on
    test.jsonl; parameter count."""
    from decoderkit.cli.lm.common import load
    from decoderkit.training.lm.genre_questions import ANSWERS, choice_accuracy, read_questions
    from decoderkit.training.lm.tune import tune_loss
    from decoderkit.training.lm.tune_data import read_examples

    model, tokenizer = load(checkpoint, adapter=adapter)
    test = Path(args.data) / "test.jsonl"
    _, examples = read_examples(test, tokenizer, None, "assistant", model.config.max_len)
    choice, rest = split_loss(model, examples)
    return {"loss": tune_loss(model, examples, 32).loss, "choice": choice, "rest": rest,
            "accuracy": choice_accuracy(model, tokenizer, read_questions(test), ANSWERS),
            "params": sum(p.numel() for p in model.parameters())}


def adapter_numbers(run: Path) -> int:
    """The numbers in a run's adapter_model.safetensors (what LoRA trained)."""
    from safetensors.torch import load_file

    return sum(t.numel() for t in load_file(run / "adapter_model.safetensors").values())


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base", default="runs/shakespeare-llama")
    p.add_argument("--data", default="runs/genre-questions")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--lora-lr", default="1e-3")
    p.add_argument("--full-lr", default="1e-4")
    p.add_argument("--rank", type=int, default=8)
    p.add_argument("--alpha", type=float, default=16.0)
    p.add_argument("--targets", help="lm tune --targets (default: PEFT's, q_proj,v_proj)")
    p.add_argument("--rslora", action="store_true")
    p.add_argument("--lora-dropout", type=float, default=0.05)
    p.add_argument("--trainable-tokens", metavar="IDS",
                   help="lm tune --trainable-tokens (e.g. the answers' first tokens' ids)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--keep", help="write the two runs here (default: a temporary directory)")
    p.add_argument("--full-run", metavar="DIR",
                   help="an earlier --full run of --steps steps, taken instead of a new one")
    return p.parse_args()


def main() -> None:
    args = parse()
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        where = Path(args.keep or tmp)
        lora_dir = where / "lora"
        full_dir = Path(args.full_run) if args.full_run else where / "full"
        valid, seconds = {}, {}
        valid["lora"], seconds["lora"] = tune(args, lora_dir, lora_flags(args))
        if args.full_run:
            valid["full"], seconds["full"] = validated(full_dir, args.steps), None
        else:
            valid["full"], seconds["full"] = tune(args, full_dir, [
                "--full", "--lr", args.full_lr, "--overwrite"])
        untuned = held_out(args, args.base, None)
        test = {"lora": held_out(args, args.base, str(lora_dir)),
                "full": held_out(args, str(full_dir), None)}
        trained = {"lora": adapter_numbers(lora_dir), "full": test["full"]["params"]}
    print(f"{args.base} tuned {args.steps} steps on {args.data}/train.jsonl "
          f"(LoRA {' '.join(lora_flags(args)[:-1])}; full lr {args.full_lr}"
          f"{' from ' + args.full_run if args.full_run else ''}; {args.threads} threads)")
    for name in ("lora", "full"):
        t = test[name]
        took = "" if seconds[name] is None else f" | {seconds[name]:.0f} s"
        print(f"{name:>4}: validation loss {valid[name]:.4f} | held-out plays loss "
              f"{t['loss']:.4f} (choice {t['choice']:.4f}, after it {t['rest']:.4f}), "
              f"accuracy {t['accuracy']:.4f} | trained {trained[name]:,} of {t['params']:,} "
              f"({100 * trained[name] / t['params']:.2f}%){took}")
    print(f"LoRA / full: validation loss {valid['lora'] / valid['full']:.3f}, held-out plays "
          f"loss {test['lora']['loss'] / test['full']['loss']:.3f} (goal: at most 1.05, at "
          f"under 2% of the parameters)")
    print(f"untuned: held-out plays loss {untuned['loss']:.4f} (choice {untuned['choice']:.4f}, "
          f"after it {untuned['rest']:.4f}), accuracy {untuned['accuracy']:.4f} "
          "(chance: 0.3333)")


if __name__ == "__main__":
    main()
