"""Memory of opening a Hugging Face LM directory: the peak resident size a load adds, against
the model's own float32 bytes, for one model.safetensors and a sharded index, float32 and
bfloat16 weights; beside it the same weights read whole first (every file tensor held while
the model is filled: the pipeline before nn.stored).

A random GPT-2-small-shaped model (12 layers, width 768, vocabulary 50,257: 124 M parameters,
498 MB in float32) is written by transformers' ``save_pretrained``; each load runs in a fresh
child process, which reports its resident size before the load, its peak during it
(``VmHWM``, reset by ``/proc/self/clear_refs`` just before) and its resident size after, split
into anonymous memory (what the process holds) and file pages (the mapped weights, which the
kernel can drop), so that nothing of another load is counted.

    .venv/bin/python benchmarks/hf_load.py [--layers 12] [--width 768] [--shard 100MB]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = r"""
import json, sys
import torch
torch.set_num_threads(1)
from decoderkit.interop.checkpoints import load_checkpoint
from decoderkit.interop.gpt import hf
from decoderkit.nn import weights

def status(key):
    return next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith(key))

path, whole = sys.argv[1], sys.argv[2] == "whole"
if whole:  # every tensor read before the model is filled
    read = weights.read_tensors
    weights.read_tensors = lambda file, limit: dict(read(file, limit))
with open("/proc/self/clear_refs", "w") as f:  # the peak (VmHWM) from here on
    f.write("5")
before = status("VmRSS:")
model = load_checkpoint(path).model
print(json.dumps({"before": before, "peak": status("VmHWM:"), "anon": status("RssAnon:"),
                  "file": status("RssFile:"), "params": sum(p.numel() for p in
                  model.parameters())}))
"""


def load_in_child(path: Path, whole: bool) -> dict:
    """The child's figures (KiB) of loading ``path``."""
    out = subprocess.run([sys.executable, "-c", CHILD, str(path), "whole" if whole else "lazy"],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def write(directory: Path, layers: int, width: int, dtype: str, shard: str | None) -> Path:
    """A random GPT-2 directory of that shape and dtype (sharded at ``shard``)."""
    import torch
    import transformers

    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=layers, n_embd=width, n_head=width // 64)
    model = transformers.GPT2LMHeadModel(config).to(getattr(torch, dtype))
    model.save_pretrained(directory, **({"max_shard_size": shard} if shard else {}))
    return directory


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--width", type=int, default=768)
    p.add_argument("--shard", default="100MB", help="shard size of the sharded copies")
    args = p.parse_args()
    print("| weights | files | read | model MB | peak added MB | x model | anon after MB | "
          "file pages after MB |\n| --- | --- | --- | --- | --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory() as tmp:
        for dtype in ("float32", "bfloat16"):
            for shard in (None, args.shard):
                path = write(Path(tmp) / f"{dtype}-{shard}", args.layers, args.width, dtype,
                             shard)
                files = "one" if shard is None else f"shards of {shard}"
                for whole in (False, True):
                    got = load_in_child(path, whole)
                    model = got["params"] * 4 / 2**20
                    added = (got["peak"] - got["before"]) / 1024
                    read = "whole first" if whole else "a tensor at a time"
                    print(f"| {dtype} | {files} | {read} | {model:.0f} | {added:.0f} | "
                          f"{added / model:.2f} | "
                          f"{got['anon'] / 1024:.0f} | {got['file'] / 1024:.0f} |", flush=True)


if __name__ == "__main__":
    main()
