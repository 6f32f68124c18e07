"""Opening a GGUF file: ours (the one opener: header checked, tensors dequantized one at a time
through the weights pipeline, the tokenizer rebuilt) beside transformers'
``from_pretrained(dir, gguf_file=...)`` (model and ``AutoTokenizer``), on a SmolLM2-135M-shaped
Q8_0 file: transformers' random initialisation of the shape, a synthetic byte-level BPE of
SmolLM2's 49,152 tokens and ~48,900 merges (SmolLM's pre-tokenizer rules), written by our export
as float32 and quantized to Q8_0 by llama.cpp (``llama_model_quantize``; nothing downloaded).

Each side opens the file in its own child process, after its imports: the seconds of the open,
and its peak resident memory (VmHWM) above what the process held before it, beside the
float32 model's bytes. Goals: ours at most 1.5x transformers' time and at most its peak memory;
ours at most 1.3x the float32 model while opening.

    .venv/bin/python benchmarks/gguf_open.py [--threads 2] [--keep DIR] [--file FILE.gguf]
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

# SmolLM2-135M's config.json (HuggingFaceTB/SmolLM2-135M), its shape only
SMOLLM2 = dict(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
               num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=2048,
               rms_norm_eps=1e-5, rope_theta=100000.0, tie_word_embeddings=True,
               bos_token_id=0, eos_token_id=0)
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]  # SmolLM2's first ids
Q8_0 = 7  # llama_ftype LLAMA_FTYPE_MOSTLY_Q8_0


def synthetic_tokenizer(size: int):
    """A byte-level BPE of ``size`` tokens: the special tokens, the 256 byte symbols, then merges
    of two earlier tokens (pseudo-random, deterministic) up to ``size``, under SmolLM's rules."""
    import random

    from tokenizers import Tokenizer

    from decoderkit.interop.gguf.pretokenizer import SPECS
    from decoderkit.text.lm.tokenizer import LMTokenizer

    alphabet = sorted(__import__("tokenizers").pre_tokenizers.ByteLevel.alphabet())
    tokens, merges, rng = [*SPECIALS, *alphabet], [], random.Random(0)
    vocab = {t: i for i, t in enumerate(tokens)}
    while len(tokens) < size:
        a, b = (tokens[rng.randrange(len(SPECIALS), len(tokens))] for _ in range(2))
        if a + b not in vocab and len(a + b) <= 12:
            vocab[a + b] = len(tokens)
            tokens.append(a + b)
            merges.append([a, b])
    spec = SPECS["smollm"]
    added = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for i, t in enumerate(SPECIALS)]
    hf = Tokenizer.from_str(json.dumps({
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": None, "pre_tokenizer": spec["pre_tokenizer"], "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                    "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": merges}}))
    return LMTokenizer(hf)


def make_file(root: Path) -> Path:
    """The Q8_0 file (see the module docstring), written under ``root``."""
    import llama_cpp
    import transformers

    from decoderkit.interop.gguf.export import export_gguf
    from decoderkit.interop.llama.hf import load_llama

    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**SMOLLM2))
    model.save_pretrained(root / "hf")
    synthetic_tokenizer(SMOLLM2["vocab_size"]).save(root / "hf" / "tokenizer.json")
    lm, tokenizer = load_llama(root / "hf")
    f32 = export_gguf(lm, tokenizer, root / "f32") / "model.gguf"
    (root / "q8").mkdir()
    out = root / "q8" / "smollm2-135m-q8_0.gguf"
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = Q8_0
    assert llama_cpp.llama_model_quantize(str(f32).encode(), str(out).encode(), params) == 0
    return out


def child(side: str, file: Path, threads: int) -> dict:
    """One side's open of ``file``, timed, in this (fresh) process."""
    torch.set_num_threads(threads)
    if side == "ours":
        from decoderkit.interop.checkpoints import load_checkpoint
    else:
        import transformers
    before = _rss()
    start = time.perf_counter()
    if side == "ours":
        model = load_checkpoint(file).model
    else:
        model = transformers.AutoModelForCausalLM.from_pretrained(file.parent,
                                                                  gguf_file=file.name)
        transformers.AutoTokenizer.from_pretrained(file.parent, gguf_file=file.name)
    seconds = time.perf_counter() - start
    peak = _status("VmHWM")
    numbers = sum(p.numel() for p in model.parameters())
    return {"seconds": seconds, "peak_above": peak - before, "peak": peak, "before": before,
            "float32": numbers * 4}


def _rss() -> int:
    """This process's resident bytes now (Linux: /proc/self/statm)."""
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _status(key: str) -> int:
    """A byte count of /proc/self/status (VmHWM: the peak resident memory of this process's
    own address space; ru_maxrss is not: Linux carries the parent's over fork and exec)."""
    line = next(x for x in Path("/proc/self/status").read_text().splitlines()
                if x.startswith(key + ":"))
    return int(line.split()[1]) * 1024


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--keep", type=Path, help="write the file here (kept) instead of a temp dir")
    p.add_argument("--file", type=Path, help="open this GGUF file instead of making one")
    p.add_argument("--child", nargs=2, metavar=("SIDE", "FILE"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps(child(args.child[0], Path(args.child[1]), args.threads)))
        return
    with tempfile.TemporaryDirectory() as tmp:
        root = args.keep or Path(tmp)
        file = args.file or make_file(root)
        size = file.stat().st_size
        found = {side: json.loads(subprocess.run(
            [sys.executable, __file__, "--threads", str(args.threads), "--child", side,
             str(file)], check=True, capture_output=True, text=True).stdout.splitlines()[-1])
            for side in ("ours", "transformers")}
    ours, theirs = found["ours"], found["transformers"]
    mb = 1 << 20
    print(f"SmolLM2-135M shape, Q8_0 ({size / mb:.0f} MB file), "
          f"{args.threads} threads; float32 model {ours['float32'] / mb:.0f} MB")
    print(f"open seconds: ours {ours['seconds']:.2f}, transformers gguf_file= (model + "
          f"tokenizer) {theirs['seconds']:.2f}: ours / theirs "
          f"{ours['seconds'] / theirs['seconds']:.2f}")
    print(f"peak memory above the process's before the open: ours "
          f"{ours['peak_above'] / mb:.0f} MB, transformers {theirs['peak_above'] / mb:.0f} MB: "
          f"ratio {ours['peak_above'] / theirs['peak_above']:.2f}")
    print(f"ours while opening / the float32 model: {ours['peak_above'] / ours['float32']:.2f}x")


if __name__ == "__main__":
    main()
