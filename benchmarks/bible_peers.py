"""The peers of benchmarks/bible.py, each trained for a wall-clock budget on the same data,
vocabulary and architecture as ours, with its own small-data settings: Marian (pymarian's
``Trainer``, in a subprocess stopped at the budget) and Hugging Face (``MarianMTModel`` built
from a config, trained by a plain PyTorch loop on the same batches as ours)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from decoderkit.training.seq2seq.data import read_tsv

# Marian's own small-data settings (its transformer defaults where unnamed): the architecture
# is SHAPE's; exponential-smoothing is Marian's moving average of the weights
MARIAN = {"type": "transformer", "tied-embeddings-all": True, "transformer-dropout": 0.1,
          "label-smoothing": 0.1, "learn-rate": 0.0006, "lr-warmup": 400,
          "lr-decay-inv-sqrt": 400, "exponential-smoothing": 0.0001, "mini-batch-fit": False,
          "mini-batch": 64, "max-length": 200, "save-freq": "20u", "disp-freq": "10u",
          "sigterm": "save-and-exit",
          "seed": 1, "after": "1000000u", "workspace": 1024, "transformer-ffn-activation": "relu"}
TRAIN = """
import json, sys
import pymarian
options = {k.replace("-", "_"): v for k, v in json.loads(sys.argv[1]).items()}
pymarian.Trainer(**options).train()
"""
LOG = re.compile(r"Up\. ([\d,]+) .* after ([\d,]+) : Time ([\d.]+)s")


def marian_options(shape: dict) -> dict:
    """Marian's names for the shared architecture ``shape``."""
    return {"enc-depth": shape["layers"], "dec-depth": shape["layers"],
            "dim-emb": shape["d_model"], "transformer-heads": shape["heads"],
            "transformer-dim-ffn": shape["d_ff"]}


def train_marian(data: Path, vocab: Path, size: int, shape: dict, work: Path, budget: float,
                 threads: int) -> tuple[Path, dict]:
    """Marian trained on ``data/train.tsv`` with the sentencepiece ``vocab`` for ``budget``
    seconds (stopped then; its last saved model kept): (the model directory, {updates, target
    tokens, seconds of its logged training time})."""
    model = work / "marian"
    model.mkdir(parents=True, exist_ok=True)
    pairs = read_tsv(data / "train.tsv")
    for i, name in enumerate(("train.src", "train.tgt")):
        (work / name).write_text("".join(p[i] + "\n" for p in pairs))
    options = {**MARIAN, **marian_options(shape), "model": str(model / "model.npz"),
               "cpu-threads": threads, "dim-vocabs": [size, size],
               "train-sets": [str(work / "train.src"), str(work / "train.tgt")],
               "vocabs": [str(vocab)] * 2, "log": str(model / "train.log")}
    trainer = subprocess.Popen([sys.executable, "-c", TRAIN, json.dumps(options)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        trainer.wait(budget)
    except subprocess.TimeoutExpired:
        trainer.terminate()  # --sigterm save-and-exit: it saves after the update it is in
        try:
            trainer.wait(120)
        except subprocess.TimeoutExpired:
            trainer.kill()
            trainer.wait()
    logged = [LOG.search(line) for line in (model / "train.log").read_text().splitlines()]
    logged = [m for m in logged if m]
    return model, {"updates": int(logged[-1][1].replace(",", "")) if logged else 0,
                   "tokens": int(logged[-1][2].replace(",", "")) if logged else 0,
                   "seconds": sum(float(m[3]) for m in logged)}


HF = {"lr": 6e-4, "warmup": 400, "betas": (0.9, 0.98), "weight_decay": 0.0, "smoothing": 0.1,
      "dropout": 0.1, "clip": 1.0}  # Hugging Face's run: AdamW, inverse-sqrt decay


def hf_model(size: int, shape: dict, pad_id: int, eos_id: int):
    """``MarianMTModel`` of the shared architecture: post-norm, ReLU, scaled embeddings, one
    embedding for source, target and output, the decoder starting from the pad token."""
    from transformers import MarianConfig, MarianMTModel

    config = MarianConfig(
        vocab_size=size, decoder_vocab_size=size, d_model=shape["d_model"],
        encoder_layers=shape["layers"], decoder_layers=shape["layers"],
        encoder_attention_heads=shape["heads"], decoder_attention_heads=shape["heads"],
        encoder_ffn_dim=shape["d_ff"], decoder_ffn_dim=shape["d_ff"],
        activation_function="relu", dropout=HF["dropout"], attention_dropout=HF["dropout"],
        activation_dropout=0.0, max_position_embeddings=256, scale_embedding=True,
        share_encoder_decoder_embeddings=True, tie_word_embeddings=True, pad_token_id=pad_id,
        eos_token_id=eos_id, decoder_start_token_id=pad_id, forced_eos_token_id=None)
    torch.manual_seed(1)
    return MarianMTModel(config)


def train_hf(model, batches, pad_id: int, budget: float) -> dict:
    """A plain loop: AdamW under linear warm-up then inverse-sqrt decay, label-smoothed
    cross-entropy per target token, gradient clipping, until ``budget`` seconds have passed:
    {updates, target tokens, seconds}."""
    from transformers import get_inverse_sqrt_schedule

    optimizer = torch.optim.AdamW(model.parameters(), lr=HF["lr"], betas=HF["betas"],
                                  weight_decay=HF["weight_decay"])
    schedule = get_inverse_sqrt_schedule(optimizer, num_warmup_steps=HF["warmup"])
    model.train()
    start, updates, tokens = time.perf_counter(), 0, 0
    while time.perf_counter() - start < budget:
        b = next(batches)
        logits = model(input_ids=b.src, attention_mask=b.src != pad_id,
                       decoder_input_ids=b.tgt_in).logits  # (B, T, V)
        loss = F.cross_entropy(logits.flatten(0, 1), b.labels.flatten(), ignore_index=pad_id,
                               label_smoothing=HF["smoothing"], reduction="sum") / b.n_tokens
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), HF["clip"])
        optimizer.step()
        schedule.step()
        updates, tokens = updates + 1, tokens + b.n_tokens
    return {"updates": updates, "tokens": tokens, "seconds": time.perf_counter() - start}


def hf_translate(model, tokenizer, lines: list[str], pad_id: int, beam: int,
                 length_penalty: float, batch_size: int = 32) -> list[str]:
    """Hugging Face's own ``generate`` (beam search, the pad token banned), at most 2 S + 16
    new tokens, as ours."""
    model.eval()
    out = []
    with torch.no_grad():
        for i in range(0, len(lines), batch_size):
            ids = [tokenizer.encode(line) for line in lines[i:i + batch_size]]
            width = max(map(len, ids))
            src = torch.tensor([x + [pad_id] * (width - len(x)) for x in ids])
            done = model.generate(input_ids=src, attention_mask=src != pad_id, num_beams=beam,
                                  length_penalty=length_penalty, bad_words_ids=[[pad_id]],
                                  max_new_tokens=min(2 * width + 16, 255), early_stopping=True)
            out += [tokenizer.decode([t for t in row.tolist() if t != pad_id]) for row in done]
    return out


def tokens_per_second(run: dict) -> float:
    """Target tokens trained per second of training (0 if none)."""
    return run["tokens"] / run["seconds"] if run["seconds"] else 0.0
