"""LoRA training on the SmolLM2-135M shape: ours (``nn.lora`` on ``DecoderOnlyLM``, opened from
the directory by the one opener) beside PEFT on transformers' ``LlamaForCausalLM``, each in a
plain AdamW loop written here: the same random weights (a directory transformers saves; nothing
downloaded), r, alpha, targets, batch, sequence length and threads.

Each side runs in its own fresh child process: ``--warmup`` untimed steps, then ``--steps``
timed ones; tokens/s = batch x length x steps / their time. Printed: both figures and the
ratio (ours / PEFT: >= 1 ours faster), each side's peak resident memory (VmHWM: that process's
own address space; not ru_maxrss, which Linux carries over fork and exec from the parent that
built and saved the base) and ours / PEFT's, the trainable share of the parameters, and
the size on disk of the adapter ``lm tune`` writes (adapter_model.safetensors).

    .venv/bin/python benchmarks/tune.py [--threads 2] [--batch 2] [--length 128] [--steps 4]
        [--warmup 2] [--rank 8] [--targets q_proj,v_proj]
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
import torch.nn.functional as F  # noqa: E402

# SmolLM2-135M's config.json (HuggingFaceTB/SmolLM2-135M), its shape only
SMOLLM2 = dict(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
               num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=2048,
               rms_norm_eps=1e-5, rope_theta=100000.0, tie_word_embeddings=True,
               bos_token_id=0, eos_token_id=0)


def save_base(directory: Path) -> None:
    """The SmolLM2-135M shape with transformers' own random initialisation, saved."""
    import transformers

    torch.manual_seed(0)
    transformers.LlamaForCausalLM(transformers.LlamaConfig(**SMOLLM2)).save_pretrained(directory)


def batches(args, n: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return [torch.randint(0, SMOLLM2["vocab_size"], (args.batch, args.length + 1), generator=g)
            for _ in range(n)]


def ours(args, base: Path) -> tuple[torch.nn.Module, callable]:
    from decoderkit.interop.checkpoints import load_checkpoint
    from decoderkit.nn.lm.lora import add_lora
    from decoderkit.nn.lora import LoRAConfig

    model = load_checkpoint(base).model
    add_lora(model, LoRAConfig(r=args.rank, alpha=2 * args.rank, targets=args.targets))
    model.train()

    def loss(ids: torch.Tensor) -> torch.Tensor:
        logits = model(ids[:, :-1])
        return F.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten())

    return model, loss


def theirs(args, base: Path) -> tuple[torch.nn.Module, callable]:
    import peft
    import transformers

    hf = transformers.LlamaForCausalLM.from_pretrained(base, torch_dtype=torch.float32)
    model = peft.get_peft_model(hf, peft.LoraConfig(r=args.rank, lora_alpha=2 * args.rank,
                                                    lora_dropout=0.0, task_type="CAUSAL_LM",
                                                    target_modules=list(args.targets)))
    model.train()

    def loss(ids: torch.Tensor) -> torch.Tensor:
        logits = model(input_ids=ids[:, :-1]).logits
        return F.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten())

    return model, loss


def peak_mb() -> float:
    """This process's peak resident memory (Linux: VmHWM of /proc/self/status), in MB."""
    line = next(x for x in Path("/proc/self/status").read_text().splitlines()
                if x.startswith("VmHWM:"))
    return int(line.split()[1]) / 1024


def side(args) -> dict:
    """One side's loop in this process: tokens/s, peak memory, trainable parameters."""
    torch.set_num_threads(args.threads)
    model, loss = (ours if args.side == "ours" else theirs)(args, Path(args.base))
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=1e-4)
    data = batches(args, args.warmup + args.steps)
    for i, ids in enumerate(data):
        if i == args.warmup:
            started = time.perf_counter()
        loss(ids).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    elapsed = time.perf_counter() - started
    out = {"tokens_per_s": args.batch * args.length * args.steps / elapsed,
           "peak_mb": peak_mb(),
           "trainable": sum(p.numel() for p in params),
           "total": sum(p.numel() for p in model.parameters())}
    if args.side == "ours":
        from decoderkit.interop.lm.peft import write_adapter_files
        from decoderkit.nn.lora import LoRAConfig

        with tempfile.TemporaryDirectory() as tmp:
            lora = LoRAConfig(r=args.rank, alpha=2 * args.rank, targets=args.targets)
            write_adapter_files(Path(tmp), model, lora, args.base)
            out["adapter_bytes"] = (Path(tmp) / "adapter_model.safetensors").stat().st_size
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--length", type=int, default=128)
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--rank", type=int, default=8)
    p.add_argument("--targets", type=lambda s: tuple(s.split(",")), default=("q_proj", "v_proj"))
    p.add_argument("--side", choices=("ours", "peft"), help=argparse.SUPPRESS)
    p.add_argument("--base", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.side:
        print(json.dumps(side(args)))
        return
    with tempfile.TemporaryDirectory() as tmp:
        save_base(Path(tmp))
        flags = [a for a in sys.argv[1:]]
        got = {name: json.loads(subprocess.run(
            [sys.executable, __file__, *flags, "--side", name, "--base", tmp], check=True,
            capture_output=True, text=True).stdout.strip().splitlines()[-1])
            for name in ("ours", "peft")}
    o, t = got["ours"], got["peft"]
    print(f"SmolLM2-135M shape, LoRA r={args.rank} alpha={2 * args.rank} on "
          f"{','.join(args.targets)}; batch {args.batch} x {args.length}, {args.threads} "
          f"threads, {args.steps} timed steps after {args.warmup}")
    print(f"tokens/s: ours {o['tokens_per_s']:.1f}, PEFT on transformers "
          f"{t['tokens_per_s']:.1f}: ratio {o['tokens_per_s'] / t['tokens_per_s']:.2f}")
    print(f"peak memory: ours {o['peak_mb']:.0f} MB, PEFT {t['peak_mb']:.0f} MB: ratio "
          f"{o['peak_mb'] / t['peak_mb']:.2f}")
    print(f"trained: ours {o['trainable']:,} of {o['total']:,} "
          f"({100 * o['trainable'] / o['total']:.2f}%), PEFT {t['trainable']:,}")
    print(f"adapter on disk: {o['adapter_bytes'] / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
