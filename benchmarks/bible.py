"""Spanish -> English on the Bible's test books (Mark, John): decoderkit, Marian (pymarian) and
Hugging Face (``MarianMTModel``) each trained for the same wall-clock budget on the same data,
one joint sentencepiece vocabulary (learned here, Marian's layout: ``</s>`` 0, ``<unk>`` 1),
the same architecture (``SHAPE``) and threads, each with its own small-data settings; then
BLEU / chrF (sacrebleu; two references where test.tsv has the WEB's third column) of each at
beam 4, training tokens/s, and the time to translate the test books at beam 4 on Marian's
model: Marian's translator, ours float32 and int8 (the ``.npz`` opened by
``interop.marian.npz``) and CTranslate2 int8 of our export, as ratios measured in one run.

    python -m decoderkit data bible --out runs/bible
    OMP_WAIT_POLICY=PASSIVE python benchmarks/bible.py --data runs/bible --work /tmp/bb
    # a shared or loaded machine: --threads 1 (two OpenMP threads wait on each other)

Settings (each system's own, for ~29k pairs trained for minutes): ours is ``make
bible-demo``'s recipe (noam warm-up, label smoothing and dropout 0.1, every embedding tied, a
moving average of the weights); Marian's and Hugging Face's are in ``bible_peers``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
from sacrebleu.metrics import BLEU, CHRF

from decoderkit.generation.seq2seq.int8 import quantize_int8
from decoderkit.generation.seq2seq.translate import DecodeOptions, translate_lines
from decoderkit.interop.checkpoints import load_checkpoint
from decoderkit.interop.seq2seq.ctranslate2 import Ctranslate2Engine, export_ctranslate2
from decoderkit.interop.marian.npz import read_vocabulary
from decoderkit.nn.seq2seq.model import ModelConfig
from decoderkit.training.distributed import Context
from decoderkit.training.seq2seq.data import read_tsv
from decoderkit.training.seq2seq.fit import DataConfig, Seq2Seq, TrainConfig, fit, prepare_data
from decoderkit.text.seq2seq.spm_tokenizer import MARIAN_SPECIALS, sentencepiece_model

sys.path.insert(0, str(Path(__file__).parent))
import bible_peers as peers  # noqa: E402  (beside this file)

SHAPE = {"layers": 2, "d_model": 128, "heads": 4, "d_ff": 512}  # make bible-demo's
BEAM, PENALTY = 4, 0.6  # make bible-demo's decoding, for every system
BATCH, MARIAN_BATCH = 64, 32  # lines translated together: ours and CTranslate2 at 64 (make
# bible-demo's; faster than 32 for both), Marian's translator at its faster 32 (benchmarks/README)
WORKERS = 2  # batches translated at once by ours and CTranslate2, the threads shared among
# them (each one thread at --threads 2: 1.7x ours, 4x CTranslate2's 2 intra-op threads, measured);
# Marian's translator's --cpu-threads are such workers already
OURS = {"batch_size": 64, "warmup": 400, "lr_factor": 1.0, "smoothing": 0.1, "ema": 0.999,
        "dropout": 0.1, "attention_dropout": 0.0, "ffn_dropout": 0.0}  # make bible-demo's
# recipe: dropout where Marian's transformer puts it (embeddings, sublayer outputs)


def vocabulary(data: Path, work: Path, size: int) -> Path:
    """One sentencepiece model learned from both sides of the training split (reused)."""
    path = work / f"joint-{size}.spm"
    if not path.is_file():
        pairs = read_tsv(data / "train.tsv")
        texts = [s for s, _ in pairs] + [t for _, t in pairs]
        path.write_bytes(sentencepiece_model(texts, size, MARIAN_SPECIALS))
    return path


def train_ours(data: Path, vocab: Path, size: int, work: Path, budget: float):
    """decoderkit's training loop for ``budget`` seconds: (checkpoint, run stats, batches
    stream for the peers: the same micro-batches)."""
    tokenizers = (read_vocabulary(vocab, size, add_eos=True),
                  read_vocabulary(vocab, size, add_eos=False))
    config = ModelConfig(size + 1, size + 1, SHAPE["layers"], SHAPE["d_model"], SHAPE["heads"],
                         SHAPE["d_ff"], OURS["dropout"], tie_embeddings=True,
                         tie_generator=True, max_len=256, pad_id=size, bos_id=size, eos_id=0,
                         attention_dropout=OURS["attention_dropout"],
                         ffn_dropout=OURS["ffn_dropout"])
    prepared = prepare_data(DataConfig(tsv=str(data / "train.tsv"), valid_size=32,
                                       max_tokens=200), tokenizers)
    cfg = TrainConfig(batch_size=OURS["batch_size"], max_steps=10**7, time_limit=budget,
                      warmup=OURS["warmup"], lr_factor=OURS["lr_factor"],
                      smoothing=OURS["smoothing"], valid_every=10**7, ema=OURS["ema"])
    result = fit(config, cfg, prepared, work / "ours", overwrite=True, progress=False, show=0)
    recipe = Seq2Seq(config, cfg, prepared, False, 0)
    stream = recipe.batches(0, Context(rank=0, world=1, device=torch.device("cpu")))
    tokens = sum(next(stream).n_tokens for _ in range(result.step))
    run = {"updates": result.step, "tokens": tokens, "seconds": budget}
    return load_checkpoint(work / "ours"), run, recipe.batches(
        0, Context(rank=0, world=1, device=torch.device("cpu"))), tokenizers


def score(hyps: list[str], refs: list[list[str | None]]) -> dict:
    """BLEU and chrF of ``hyps`` against every reference stream (None: no such reference),
    and their sacrebleu signatures."""
    hyps = [" ".join(h.replace("\u2047", " ").split()) for h in hyps]
    found = {}
    for name, metric in (("bleu", BLEU()), ("chrf", CHRF())):
        found[name] = metric.corpus_score(hyps, refs).score
        found[f"{name} signature"] = str(metric.get_signature())
    return found


def timed(translate, lines: list[str]) -> tuple[list[str], float]:
    start = time.perf_counter()
    hyps = translate(lines)
    return hyps, time.perf_counter() - start


def engines(model: Path, threads: int, work: Path) -> dict:
    """Marian's model in each engine: name -> translate(lines) -> texts."""
    import pymarian

    vocab = str(model / "vocab.spm")
    marian = pymarian.Translator(models=str(model / "model.npz"), vocabs=[vocab, vocab],
                                 beam_size=BEAM, normalize=PENALTY, cpu_threads=threads,
                                 mini_batch=MARIAN_BATCH, quiet=True)
    ckpt = load_checkpoint(model)
    options = DecodeOptions(beam=BEAM, length_penalty=PENALTY)
    ct2 = work / "ours-ct2-int8"
    export_ctranslate2(ckpt, ct2, "int8", overwrite=True)
    engine = Ctranslate2Engine(ct2, threads=threads, workers=WORKERS)
    int8 = type(ckpt)(quantize_int8(ckpt.model), ckpt.config, ckpt.src_tokenizer,
                      ckpt.tgt_tokenizer, ckpt.step, ckpt.path, ckpt.meta)

    def ours(model):
        return lambda x: [t.text for t in translate_lines(model, x, options, BATCH, WORKERS)]

    return {"marian translator": marian.translate, "ours float32": ours(ckpt),
            "ours int8": ours(int8), "ctranslate2 int8 (our export)":
                lambda x: [t.text for t in engine.translate_lines(x, options, BATCH)]}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", type=Path, default=Path("runs/bible"))
    p.add_argument("--work", type=Path, default=Path("/tmp/decoderkit-bible-bench"))
    p.add_argument("--budget", type=float, default=900.0, help="training seconds per system")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--vocab-size", type=int, default=4000, help="the joint vocabulary's pieces")
    p.add_argument("--lines", type=int, default=0, help="test verses used (0: all)")
    p.add_argument("--model", type=Path, help="no training: time the engines on this Marian "
                   "model directory (model.npz, its .yml files and vocab.spm), e.g. an earlier "
                   "run's WORK/marian")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    args.work.mkdir(parents=True, exist_ok=True)
    if args.model is not None:
        lines = test_set(args.data, args.lines)[0]
        runs = {name: timed(translate, lines)[1]
                for name, translate in engines(args.model, args.threads, args.work).items()}
        report_times(runs, lines)
        return 0
    vocab = vocabulary(args.data, args.work, args.vocab_size)
    ours, ours_run, batches, tokenizers = train_ours(args.data, vocab, args.vocab_size,
                                                     args.work, args.budget)
    pad = args.vocab_size
    hf = peers.hf_model(args.vocab_size + 1, SHAPE, pad, 0)
    hf_run = peers.train_hf(hf, batches, pad, args.budget)
    (args.work / "vocab.spm").write_bytes(vocab.read_bytes())
    marian_dir, marian_run = peers.train_marian(args.data, args.work / "vocab.spm",
                                                args.vocab_size, SHAPE, args.work,
                                                args.budget, args.threads)
    (marian_dir / "vocab.spm").write_bytes(vocab.read_bytes())
    lines, refs = test_set(args.data, args.lines)
    runs = {name: timed(translate, lines)
            for name, translate in engines(marian_dir, args.threads, args.work).items()}
    options = DecodeOptions(beam=BEAM, length_penalty=PENALTY)
    systems = {
        "decoderkit": (ours_run, [t.text for t in translate_lines(ours, lines, options,
                                                                  BATCH)]),
        "marian": (marian_run, runs["marian translator"][0]),
        "hugging face": (hf_run, peers.hf_translate(hf, tokenizers[0], lines, pad, BEAM,
                                                     PENALTY))}
    report(args, systems, refs, {name: seconds for name, (_, seconds) in runs.items()}, lines)
    return 0


def test_set(data: Path, n: int) -> tuple[list[str], list[list[str | None]]]:
    """The first ``n`` (0: all) test verses and their reference streams (the WEB's second one
    where test.tsv has the third column)."""
    test = [line.split("\t") for line in
            (data / "test.tsv").read_text(encoding="utf-8").splitlines()][:n or None]
    refs = [[row[1] for row in test]]
    if all(len(row) > 2 for row in test):
        refs.append([row[2] or None for row in test])
    return [row[0] for row in test], refs


def report(args, systems: dict, refs: list, times: dict, lines: list[str]) -> None:
    """Print each system's quality and speed, then each engine's time on Marian's model."""
    print(f"{len(lines)} test verses, {len(refs)} reference(s), beam {BEAM}, length penalty "
          f"{PENALTY}, {args.threads} threads, {args.budget:.0f} s of training each, "
          f"joint sentencepiece {args.vocab_size}, shape {SHAPE}")
    scores = {name: score(hyps, refs) for name, (_, hyps) in systems.items()}
    speed = {name: peers.tokens_per_second(run) for name, (run, _) in systems.items()}
    for name, (run, _) in systems.items():
        s = scores[name]
        print(f"  {name:14s} BLEU {s['bleu']:5.1f}  chrF {s['chrf']:5.1f}  "
              f"{run['updates']:6d} updates  {speed[name]:7.0f} target tokens/s")
    ours = scores["decoderkit"]["bleu"]
    ratio = f"{speed['decoderkit'] / speed['marian']:.2f}x" if speed["marian"] else "n/a"
    print(f"  BLEU ours - Marian: {ours - scores['marian']['bleu']:+.1f}  "
          f"ours - HF: {ours - scores['hugging face']['bleu']:+.1f}  "
          f"training tokens/s ours / Marian: {ratio}")
    print(f"  sacrebleu: {scores['decoderkit']['bleu signature']}  "
          f"{scores['decoderkit']['chrf signature']}")
    report_times(times, lines)


def report_times(times: dict, lines: list[str]) -> None:
    """Each engine's time on Marian's model, as speed against Marian's translator, and our
    int8 against CTranslate2's."""
    print(f"translating the {len(lines)} test verses with Marian's model ({BATCH} lines a "
          f"batch, {WORKERS} at once; Marian's translator {MARIAN_BATCH}):")
    for name, seconds in times.items():
        print(f"  {name:30s} {seconds:8.1f} s  speed vs Marian "
              f"{times['marian translator'] / seconds:.2f}x")
    print(f"  ours int8 vs CTranslate2 int8: "
          f"{times['ctranslate2 int8 (our export)'] / times['ours int8']:.2f}x")


if __name__ == "__main__":
    sys.exit(main())
