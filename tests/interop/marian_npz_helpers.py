"""Marian's own models for the ``.npz`` tests: tiny transformers trained here with pymarian
(its ``Trainer``, CPU, one thread, a few hundred updates) on a corpus made from the Hamlet
fixture (source: a line, target: its words in reverse order) or, for ``BIBLE``'s, on the
Bible (Spanish -> English, ``decoderkit data bible`` from Debian's SWORD modules), cached
under pytest's cache directory (a second run trains nothing). Nothing is downloaded."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from decoderkit.interop.marian import npz as marian_npz

HAMLET = Path(__file__).parents[1] / "fixtures" / "shakespeare_hamlet.txt"
# Marian's options for every model: the size and the training budget
BASE = {"type": "transformer", "enc-depth": 2, "dec-depth": 2, "dim-emb": 32,
        "transformer-heads": 2, "transformer-dim-ffn": 64, "after": "300u",
        "cpu-threads": 1, "mini-batch": 32, "learn-rate": 0.003, "lr-warmup": 50,
        "max-length": 100, "seed": 1, "quiet": True, "workspace": 256, "disp-freq": 1000,
        "save-freq": 1000}
# the configurations the tests open: what changes the function, each kind at least once
CONFIGS = {
    "post-tied-all-joint-swish": {"tied-embeddings-all": True},
    "pre-tied-separate-relu": {"transformer-preprocess": "n", "transformer-postprocess": "da",
                               "transformer-postprocess-top": "n", "tied-embeddings": True,
                               "transformer-ffn-activation": "relu", "separate": True},
    "post-tied-src-joint-relu": {"tied-embeddings-src": True,
                                 "transformer-ffn-activation": "relu"},
    "post-untied-separate-swish": {"separate": True, "transformer-dropout": 0.1},
    # separate vocabularies of different sizes, each side the larger once
    "pre-tied-separate-relu-tgt-larger": {
        "transformer-preprocess": "n", "transformer-postprocess": "da",
        "transformer-postprocess-top": "n", "tied-embeddings": True,
        "transformer-ffn-activation": "relu", "separate": True, "dim-vocabs": [180, 240]},
    "post-untied-separate-relu-src-larger": {"separate": True,
                                             "transformer-ffn-activation": "relu",
                                             "dim-vocabs": [240, 180]},
    "post-tied-separate-relu-tgt-larger": {"tied-embeddings": True, "separate": True,
                                           "transformer-ffn-activation": "relu",
                                           "dim-vocabs": [180, 240]},
}
PRE_NORM = {"transformer-preprocess": "n", "transformer-postprocess": "da",
            "transformer-postprocess-top": "n"}
# Marian's default post-norm blocks and pre-norm ones, --tied-embeddings, separate vocabularies
# of 900 and 1,000 pieces (each side the larger once), on the Bible (issue 45's models)
BIBLE = {"bible-post-tied-separate": {"tied-embeddings": True, "separate": True,
                                      "dim-vocabs": [900, 1000]},
         "bible-pre-tied-separate": {**PRE_NORM, "tied-embeddings": True, "separate": True,
                                     "dim-vocabs": [1000, 900]}}
BIBLE_TEST = 200  # the test verses compared (Mark 1:1 on)
VOCAB = 200  # sentencepiece pieces per vocabulary (unless the configuration's dim-vocabs)


def corpus(directory: Path) -> tuple[Path, Path, list[str]]:
    """(source file, target file, held-out sources): Hamlet's lines of 3-12 words."""
    lines = [" ".join(line.split()) for line in HAMLET.read_text().splitlines()]
    lines = [line for line in lines if 3 <= len(line.split()) <= 12]
    train, held = lines[:-200], lines[-200:]
    src, tgt = directory / "train.src", directory / "train.tgt"
    src.write_text("".join(f"{line}\n" for line in train))
    tgt.write_text("".join(" ".join(reversed(line.split())) + "\n" for line in train))
    return src, tgt, held


def held_out() -> list[str]:
    """The 200 source lines no model was trained on."""
    lines = [" ".join(line.split()) for line in HAMLET.read_text().splitlines()]
    return [line for line in lines if 3 <= len(line.split()) <= 12][-200:]


def bible(cache: Path) -> Path:
    """``decoderkit data bible`` (Spanish -> English) in ``cache``, made on first use (reading
    the modules: about a CPU-minute each; later runs reuse the files), with its train pairs
    also as Marian's two files; skips the test where Debian's modules are not installed."""
    from decoderkit.training.seq2seq.bible import bible as make_bible
    from decoderkit.training.seq2seq.bible_modules import MODULES
    from decoderkit.training.seq2seq.sword import SWORD_DIR

    missing = [n for n, _ in MODULES.values() if not (SWORD_DIR / "mods.d" / f"{n}.conf").is_file()]
    if missing:
        pytest.skip(f"Debian's SWORD modules {missing} are not installed (make sword)")
    out = cache / "bible"
    if not (out / "train.src").is_file():
        make_bible(out, "spa", "eng")
        pairs = [line.split("\t") for line in (out / "train.tsv").read_text().splitlines()]
        for i, name in enumerate(("train.src", "train.tgt")):
            text = "".join(p[i] + "\n" for p in pairs)
            tmp = out / f"{name}.{os.getpid()}.tmp"  # two test workers may make it at once
            tmp.write_text(text)
            tmp.rename(out / name)
    return out


def bible_test(cache: Path, n: int = BIBLE_TEST) -> list[str]:
    """The first ``n`` source verses of the Bible's test books (Mark, John)."""
    lines = (bible(cache) / "test.tsv").read_text().splitlines()[:n]
    return [line.split("\t")[0] for line in lines]


def trained(cache: Path, name: str) -> Path:
    """The directory of the model ``name`` (``CONFIGS`` or ``BIBLE``), trained on first use:
    ``model.npz`` with its ``.decoder.yml`` and the vocabularies it names."""
    on_bible = name in BIBLE
    options = {**BASE, **(BIBLE[name] if on_bible else CONFIGS[name])}
    separate = options.pop("separate", False)
    text = bible(cache) if on_bible else None
    size = (text / "train.tsv").stat().st_size if on_bible else HAMLET.stat().st_size
    key = hashlib.sha256(json.dumps([options, separate, VOCAB, size],
                                    sort_keys=True).encode()).hexdigest()[:12]
    directory = cache / f"{name}-{key}"
    if (directory / "model.npz.decoder.yml").is_file():
        return directory
    directory.mkdir(parents=True, exist_ok=True)
    src, tgt = (text / "train.src", text / "train.tgt") if on_bible else corpus(directory)[:2]
    vocabs = [directory / "src.spm", directory / "tgt.spm"] if separate \
        else [directory / "vocab.spm"] * 2
    options |= {"model": str(directory / "model.npz"), "train-sets": [str(src), str(tgt)],
                "vocabs": [str(v) for v in vocabs]}
    options.setdefault("dim-vocabs", [VOCAB, VOCAB])
    done = subprocess.run([sys.executable, "-c", TRAIN, json.dumps(options)],
                          capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise RuntimeError(f"pymarian training failed: {done.stderr[-2000:]}")
    return directory


def marian_outputs(directory, lines, beam, allow_unk=False):
    """Marian's own ``Translator`` (beam ``beam``, no length normalisation; ``<unk>`` banned
    unless ``allow_unk``, Marian's default) on ``lines``."""
    import pymarian

    vocabs = marian_npz.vocabulary_paths(directory / marian_npz.MODEL)
    translator = pymarian.Translator(
        models=str(directory / marian_npz.MODEL), vocabs=[str(v) for v in vocabs],
        beam_size=beam, normalize=0, word_penalty=0, allow_unk=allow_unk, cpu_threads=1,
        mini_batch=16, quiet=True)
    return [spaced(t) for t in translator.translate(lines)]


def our_outputs(ckpt, lines, **flags):
    """Our ``translate_lines`` with ``flags`` over the checkpoint's own settings (a Marian
    model's: ``<unk>`` never chosen), as ``translate`` decodes."""
    from decoderkit.generation.seq2seq.settings import settled_options
    from decoderkit.generation.seq2seq.translate import translate_lines
    from decoderkit.generation.settings import FLAGS, Source

    return translate_lines(ckpt, lines, settled_options([Source(FLAGS, flags)], ckpt.meta)[0])


def spaced(text):
    """Marian writes an ``<unk>`` as ' ⁇ ', our decode drops it: compared without it."""
    return " ".join(text.replace("\u2047", " ").split())


def agree(ours, theirs):
    """Equal, or ours ended at its length limit (2 S + 16 tokens; Marian's is 3 x the batch's
    source width) and is a prefix of Marian's or Marian's of ours."""
    o = spaced(ours.text)
    unfinished = not ours.tokens or ours.tokens[-1] != marian_npz.EOS
    return o == theirs or unfinished and (theirs.startswith(o) or o.startswith(theirs))


# pymarian.Trainer(**options).train() with the options' dashes as underscores
TRAIN = """
import json, sys
import pymarian
options = {k.replace("-", "_"): v for k, v in json.loads(sys.argv[1]).items()}
pymarian.Trainer(**options).train()
"""
