"""Spanish -> English on the Bible's test books (Mark, John): Marian trains a model for a
wall-clock budget, then the same model translates the test books at beam 4 through Marian's
own translator, ours in float32 and int8 (the ``.npz`` opened by ``interop.marian_npz``) and
CTranslate2 int8 of our export; BLEU / chrF (sacrebleu) and the time of each, as ratios in
one run.

    python -m decoderkit data bible --out runs/bible
    python benchmarks/bible.py --data runs/bible --work /tmp/bible-bench --budget 900

Reduced so far: ours is not trained here (its training on the same sentencepiece vocabulary
and architecture, and Hugging Face's, are still to come), so BLEU compares engines on one
model, not recipes; Marian's training speed is its own log's words/s.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import sacrebleu

from decoderkit.generation.int8 import quantize_int8
from decoderkit.generation.translate import DecodeOptions, translate_lines
from decoderkit.interop.checkpoints import load_checkpoint
from decoderkit.interop.ctranslate2 import Ctranslate2Engine, export_ctranslate2
from decoderkit.interop.marian_npz import vocabulary_paths
from decoderkit.training.seq2seq.data import read_tsv

# the architecture (make bible-demo's) and Marian's own small-data settings
MARIAN = {"type": "transformer", "enc-depth": 2, "dec-depth": 2, "dim-emb": 128,
          "transformer-heads": 4, "transformer-dim-ffn": 512, "tied-embeddings-all": True,
          "dim-vocabs": [8000, 8000], "transformer-dropout": 0.1, "label-smoothing": 0.1,
          "learn-rate": 0.0006, "lr-warmup": 1000, "lr-decay-inv-sqrt": 1000,
          "mini-batch-fit": False, "mini-batch": 64, "max-length": 200, "save-freq": "50u",
          "disp-freq": "50u", "seed": 1, "after": "1000000u", "workspace": 1024}
TRAIN = """
import json, sys
import pymarian
options = {k.replace("-", "_"): v for k, v in json.loads(sys.argv[1]).items()}
pymarian.Trainer(**options).train()
"""
BEAM = 4


def train_marian(data: Path, work: Path, budget: float, threads: int) -> tuple[Path, str]:
    """Marian trained on ``data/train.tsv`` for ``budget`` seconds (stopped then; its last
    saved model kept); (the model directory, its last words/s line)."""
    model = work / "marian"
    model.mkdir(parents=True, exist_ok=True)
    pairs = read_tsv(data / "train.tsv")
    for i, name in enumerate(("train.spa", "train.eng")):
        (work / name).write_text("".join(p[i] + "\n" for p in pairs))
    options = {**MARIAN, "model": str(model / "model.npz"), "cpu-threads": threads,
               "train-sets": [str(work / "train.spa"), str(work / "train.eng")],
               "vocabs": [str(model / "vocab.spm")] * 2, "log": str(model / "train.log")}
    try:
        subprocess.run([sys.executable, "-c", TRAIN, json.dumps(options)], timeout=budget,
                       capture_output=True)
    except subprocess.TimeoutExpired:
        pass
    speed = [line for line in (model / "train.log").read_text().splitlines()
             if "words/s" in line]
    return model, speed[-1] if speed else "no update logged"


def timed(name: str, translate, lines: list[str], refs: list[str]) -> dict:
    start = time.perf_counter()
    hyps = [" ".join(h.replace("\u2047", " ").split()) for h in translate(lines)]
    seconds = time.perf_counter() - start
    bleu, chrf = sacrebleu.corpus_bleu(hyps, [refs]), sacrebleu.corpus_chrf(hyps, [refs])
    return {"engine": name, "seconds": seconds, "bleu": bleu.score, "chrf": chrf.score}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", type=Path, default=Path("runs/bible"))
    p.add_argument("--work", type=Path, default=Path("/tmp/decoderkit-bible-bench"))
    p.add_argument("--budget", type=float, default=900.0, help="Marian's training seconds")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--lines", type=int, default=0, help="test verses used (0: all)")
    p.add_argument("--model", type=Path, help="a Marian model directory to use instead of "
                   "training one (then --budget is not used)")
    args = p.parse_args()
    import pymarian
    import torch

    torch.set_num_threads(args.threads)
    model, speed = (args.model, "given, not trained here") if args.model else \
        train_marian(args.data, args.work, args.budget, args.threads)
    test = read_tsv(args.data / "test.tsv")[:args.lines or None]
    lines, refs = [s for s, _ in test], [t for _, t in test]
    vocabs = [str(v) for v in vocabulary_paths(model / "model.npz")]
    marian = pymarian.Translator(models=str(model / "model.npz"), vocabs=vocabs,
                                 beam_size=BEAM, normalize=0, cpu_threads=args.threads,
                                 mini_batch=32, quiet=True)
    ckpt = load_checkpoint(model)
    options = DecodeOptions(beam=BEAM, length_penalty=0.0)
    ct2 = args.work / "ours-ct2-int8"
    export_ctranslate2(ckpt, ct2, "int8", overwrite=True)
    engine = Ctranslate2Engine(ct2, threads=args.threads)
    int8 = type(ckpt)(quantize_int8(ckpt.model), ckpt.config, ckpt.src_tokenizer,
                      ckpt.tgt_tokenizer, ckpt.step, ckpt.path, ckpt.meta)
    rows = [timed("marian translator", marian.translate, lines, refs),
            timed("ours float32", lambda x: [t.text for t in translate_lines(ckpt, x, options)],
                  lines, refs),
            timed("ours int8", lambda x: [t.text for t in translate_lines(int8, x, options)],
                  lines, refs),
            timed("ctranslate2 int8 (our export)",
                  lambda x: [t.text for t in engine.translate_lines(x, options)], lines, refs)]
    trained = "given" if args.model else f"trained {args.budget:.0f} s"
    print(f"Marian model {trained} on {args.threads} threads: "
          f"{re.sub(r'^.*?Ep[.]', 'Ep.', speed)}")
    print(f"test books, {len(lines)} verses, beam {BEAM}, {args.threads} threads")
    base = {r["engine"]: r["seconds"] for r in rows}
    for r in rows:
        ratio = base["marian translator"] / r["seconds"]
        print(f"  {r['engine']:30s} {r['seconds']:8.1f} s  BLEU {r['bleu']:5.1f}  "
              f"chrF {r['chrf']:5.1f}  speed vs Marian {ratio:.2f}x")
    print(f"  ours int8 vs CTranslate2 int8: "
          f"{base['ctranslate2 int8 (our export)'] / base['ours int8']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
