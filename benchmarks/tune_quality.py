"""LoRA beside full fine-tuning on ``make tune-demo``'s data: the demo's pretrained Llama-block
Shakespeare (runs/shakespeare-llama) tuned by ``lm tune`` twice on its genre questions
(runs/genre-questions/train.jsonl), LoRA (the demo's recipe: r 8, alpha 16 on PEFT's default
targets, lr 1e-3) and ``--full`` (every weight, lr 1e-4 as litgpt's and torchtune's full
recipes use an order below LoRA's), the same steps, batch, warm-up, seed and threads. Run
``make tune-demo`` first (it makes the base and the data).

Printed for each: the lowest validation loss of the run (``lm tune``'s own: every tenth of the
training questions, per trained token), the loss on the six held-out plays' questions
(test.jsonl, the same per-token loss) and their accuracy (``lm eval --choices``' score), and
the share of the parameters trained (of the tuned model's: ``lm tune`` gives a base without an
end-of-text token one, a row LoRA trains beside its adapters); then LoRA / full for each loss
(the goal: at most 1.05) and the untuned model's accuracy. Bounded by steps: the figures do
not depend on the load.

    .venv/bin/python benchmarks/tune_quality.py [--base runs/shakespeare-llama]
        [--data runs/genre-questions] [--steps 300] [--lora-lr 1e-3] [--full-lr 1e-4]
        [--threads 2] [--keep DIR]
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # idle workers sleep: a shared CPU

import argparse  # noqa: E402
import json  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402

COMMON = ["--warmup", "20", "--batch-size", "16", "--valid-every", "100", "--seed", "0",
          "--quiet"]  # the demo's lm tune flags that both runs share


def tune(args, out: Path, flags: list[str]) -> float:
    """Run ``lm tune`` into ``out``; its lowest validation loss (meta.json's history)."""
    subprocess.run([sys.executable, "-m", "decoderkit", "lm", "tune", "--checkpoint", args.base,
                    "--data", str(Path(args.data) / "train.jsonl"), "--out", str(out),
                    "--max-steps", str(args.steps), "--threads", str(args.threads), *COMMON,
                    *flags], check=True)
    history = json.loads((out / "meta.json").read_text())["history"]
    return min(h["loss"] for h in history)


def held_out(args, checkpoint: str, adapter: str | None) -> dict:
    """Loss per trained token and choice accuracy on test.jsonl; parameter count."""
    from decoderkit.cli.lm.common import load
    from decoderkit.training.lm.genre_questions import ANSWERS, choice_accuracy, read_questions
    from decoderkit.training.lm.tune import tune_loss
    from decoderkit.training.lm.tune_data import read_examples

    model, tokenizer = load(checkpoint, adapter=adapter)
    test = Path(args.data) / "test.jsonl"
    _, examples = read_examples(test, tokenizer, None, "assistant", model.config.max_len)
    return {"loss": tune_loss(model, examples, 32).loss,
            "accuracy": choice_accuracy(model, tokenizer, read_questions(test), ANSWERS),
            "params": sum(p.numel() for p in model.parameters())}


def adapter_numbers(run: Path) -> int:
    """The numbers in a run's adapter_model.safetensors (what LoRA trained)."""
    from safetensors.torch import load_file

    return sum(t.numel() for t in load_file(run / "adapter_model.safetensors").values())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base", default="runs/shakespeare-llama")
    p.add_argument("--data", default="runs/genre-questions")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--lora-lr", default="1e-3")
    p.add_argument("--full-lr", default="1e-4")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--keep", help="write the two runs here (default: a temporary directory)")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        where = Path(args.keep or tmp)
        lora_dir, full_dir = where / "lora", where / "full"
        valid = {"lora": tune(args, lora_dir, ["--rank", "8", "--alpha", "16", "--lr",
                                               args.lora_lr, "--overwrite"]),
                 "full": tune(args, full_dir, ["--full", "--lr", args.full_lr, "--overwrite"])}
        untuned = held_out(args, args.base, None)
        test = {"lora": held_out(args, args.base, str(lora_dir)),
                "full": held_out(args, str(full_dir), None)}
        trained = {"lora": adapter_numbers(lora_dir), "full": test["full"]["params"]}
    print(f"{args.base} tuned {args.steps} steps on {args.data}/train.jsonl "
          f"(LoRA lr {args.lora_lr}, full lr {args.full_lr}; {args.threads} threads)")
    for name in ("lora", "full"):
        print(f"{name:>4}: validation loss {valid[name]:.4f} | held-out plays loss "
              f"{test[name]['loss']:.4f}, accuracy {test[name]['accuracy']:.4f} | trained "
              f"{trained[name]:,} of {test[name]['params']:,} "
              f"({100 * trained[name] / test[name]['params']:.2f}%)")
    print(f"LoRA / full: validation loss {valid['lora'] / valid['full']:.3f}, held-out plays "
          f"loss {test['lora']['loss'] / test['full']['loss']:.3f} (goal: at most 1.05, at "
          f"under 2% of the parameters)")
    print(f"untuned: held-out plays accuracy {untuned['accuracy']:.4f} (chance: 0.3333)")


if __name__ == "__main__":
    main()
