"""The data a run trains on: where the pairs come from (``DataConfig``), the held-out split,
tokenizers and the length filter (``prepare_data``), and how a checkpoint records them.

A checkpoint records its ``DataConfig`` with file paths relative to the checkpoint directory
(so ``eval`` finds the corpus from any working directory) and the corpus's sha256, so that a
resumed run or ``eval`` on a changed corpus (whose held-out split would silently differ) is
refused unless explicitly allowed.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path

from decoderkit.base.checks import MODEL_SIZES, SEED, VOCAB, check_choice, check_fields, count, size
from decoderkit.base.errors import UsageError
from decoderkit.base.files import check_input_file, files_sha256
from decoderkit.training.distributed import say
from decoderkit.training.seq2seq.data import Pair, read_parallel, read_tsv, split_held_out
from decoderkit.text.seq2seq.spm_tokenizer import train_sentencepiece
from decoderkit.training.seq2seq.tasks import get_task, task_pairs
from decoderkit.text.seq2seq.tokenizer import SPECIALS, Tokenizer

PATHS = ("tsv", "src", "tgt")  # DataConfig fields naming files
PATHS_RELATIVE = "checkpoint"  # meta["data_paths"]: how recorded paths are to be read


@dataclass(frozen=True)
class DataConfig:
    """Where the pairs come from (exactly one of task / tsv / src+tgt) and how to split them."""

    task: str | None = None  # built-in task name ("copy", "reverse", "sort", "dates")
    tsv: str | None = None  # corpus file of 'source<TAB>target' lines
    src: str | None = None  # corpus as two line-aligned files: sources ...
    tgt: str | None = None  # ... and targets
    train_size: int = 20000  # built-in tasks: training pairs generated
    valid_size: int = 500  # held-out pairs
    vocab_size: int = 8000  # corpus: vocabulary per side (the one joint one for spm-joint)
    tokenizer: str = "bpe"  # corpus: a key of TOKENIZERS (how the vocabularies are learned)
    max_tokens: int = 126  # corpus: pairs with a longer side (in tokens) are dropped
    seed: int = 0  # generation and held-out split

    def __post_init__(self):
        for name in ("task", *PATHS):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value):
                raise UsageError(f"{name} must be a non-empty str or None, got {value!r}")
        check_fields(self, DATA_RANGES)
        check_choice("tokenizer", self.tokenizer, TOKENIZERS)


# the corpus's tokenizers, each learned from the training split only
TOKENIZERS = {"bpe": "byte-pair encoding (HF tokenizers), one vocabulary per side",
              "spm": "sentencepiece (unigram), one vocabulary per side",
              "spm-joint": "one sentencepiece (unigram) vocabulary learned from both sides: "
                           "the same ids on both, so the embeddings can be tied"}
JOINT = ("spm-joint",)  # the TOKENIZERS whose two sides are one vocabulary


DATA_RANGES = {"train_size": size(), "valid_size": size(),
               "vocab_size": count(len(SPECIALS) + 1, VOCAB.high),
               "max_tokens": MODEL_SIZES["max_len"], "seed": SEED}


@dataclass
class Prepared:
    """Tokenised data ready for training."""

    config: DataConfig
    src_tokenizer: Tokenizer
    tgt_tokenizer: Tokenizer
    train: list[Pair]
    valid: list[Pair]
    valid_texts: list[tuple[str, str]]  # held-out (source, reference) texts
    dropped: tuple[int, int] = (0, 0)  # (train, held-out) pairs dropped: empty or too long


def prepare_data(cfg: DataConfig, tokenizers: tuple[Tokenizer, Tokenizer] | None = None,
                 ) -> Prepared:
    """Generate or read the pairs, split off the held-out set, build (or reuse) tokenizers."""
    given = [name for name in ("task", "tsv", "src") if getattr(cfg, name)]
    if len(given) != 1 or bool(cfg.src) != bool(cfg.tgt):
        raise UsageError("give exactly one data source: a task, a TSV file, or src and tgt files")
    if cfg.task:
        train, valid = task_pairs(cfg.task, cfg.train_size, cfg.valid_size, cfg.seed)
        task = get_task(cfg.task)
        src_tok, tgt_tok = tokenizers or (Tokenizer.characters(task.src_alphabet),
                                          Tokenizer.characters(task.tgt_alphabet))
    else:
        pairs = read_tsv(cfg.tsv) if cfg.tsv else read_parallel(cfg.src, cfg.tgt)
        train, valid = split_held_out(pairs, min(cfg.valid_size, max(1, len(pairs) // 10)),
                                      cfg.seed)
        src_tok, tgt_tok = tokenizers or learn_tokenizers(cfg, train)

    def kept(texts: list[tuple[str, str]]) -> list[tuple[tuple[str, str], Pair]]:
        encoded = ((st, (src_tok.encode(st[0]), tgt_tok.encode(st[1]))) for st in texts)
        return [(st, ids) for st, ids in encoded
                if 0 < len(ids[0]) <= cfg.max_tokens and len(ids[1]) <= cfg.max_tokens]

    train_kept, held = kept(train), kept(valid)
    if not train_kept or not held:
        raise UsageError(f"no training or held-out pairs left after dropping pairs longer "
                         f"than max_tokens={cfg.max_tokens}")
    return Prepared(cfg, src_tok, tgt_tok, [ids for _, ids in train_kept],
                    [ids for _, ids in held], [text for text, _ in held],
                    (len(train) - len(train_kept), len(valid) - len(held)))


def learn_tokenizers(cfg: DataConfig, train: list[tuple[str, str]]) -> tuple[Tokenizer, Tokenizer]:
    """(source, target) tokenizers of kind ``cfg.tokenizer`` learned from the ``train`` texts;
    for a joint kind one tokenizer, both sides."""
    sources, targets = [s for s, _ in train], [t for _, t in train]
    if cfg.tokenizer in JOINT:
        joint = train_sentencepiece(sources + targets, cfg.vocab_size)
        return joint, joint
    learn = Tokenizer.train_bpe if cfg.tokenizer == "bpe" else train_sentencepiece
    return learn(sources, cfg.vocab_size), learn(targets, cfg.vocab_size)


def check_inputs(cfg: DataConfig) -> None:
    """Refuse a corpus path that is not a regular file, saying what it is (missing, a
    directory, /dev/null's character device, a pipe), before a run creates anything."""
    for name in PATHS:
        file = getattr(cfg, name)
        if file:
            check_input_file(file, f"--{'data' if name == 'tsv' else name}")


def corpus_sha256(cfg: DataConfig) -> str | None:
    """sha256 over the corpus file(s) of ``cfg`` (None for a built-in task: generated)."""
    files = [getattr(cfg, name) for name in PATHS if getattr(cfg, name)]
    return files_sha256(files) if files else None


def data_meta(cfg: DataConfig, checkpoint: str | Path) -> dict:
    """What a checkpoint in ``checkpoint`` records of ``cfg``: its fields (paths relative to the
    checkpoint directory), how paths are recorded, and the corpus checksum."""
    return {**_relative(cfg, checkpoint), "corpus_sha256": corpus_sha256(cfg)}


def relocated_data(meta: dict, checkpoint: str | Path, directory: str | Path) -> dict:
    """A checkpoint's data record (its ``meta``), with paths re-expressed relative to another
    ``directory`` beside it (an export), the recorded corpus checksum kept."""
    if not isinstance(meta.get("data"), dict):
        return {"data": None}
    return {**_relative(recorded_data(meta, checkpoint), directory),
            "corpus_sha256": meta.get("corpus_sha256")}


def _relative(cfg: DataConfig, directory: str | Path) -> dict:
    fields = dataclasses.asdict(cfg)
    for name in PATHS:
        if fields[name]:
            fields[name] = os.path.relpath(Path(fields[name]).resolve(),
                                           Path(directory).resolve())
    return {"data": fields, "data_paths": PATHS_RELATIVE}


def recorded_data(meta: dict, checkpoint: str | Path) -> DataConfig:
    """The ``DataConfig`` a checkpoint's ``meta`` records, its paths usable from here; checked
    as any DataConfig (``DATA_RANGES``: no edited ``train_size`` asks for 10^12 pairs), a bad
    record one ``UsageError`` naming the meta.json."""
    if not isinstance(meta.get("data"), dict):
        raise UsageError(f"{checkpoint} records no training data; pass --data")
    fields = dict(meta["data"])
    if meta.get("data_paths") == PATHS_RELATIVE:  # else written before 0.2: cwd-relative
        for name in PATHS:
            if fields.get(name):
                fields[name] = os.path.normpath(Path(checkpoint) / fields[name])
    try:
        return DataConfig(**fields)
    except (TypeError, UsageError) as err:
        raise UsageError(f"{checkpoint}/meta.json: bad 'data' record ({err})") from None


def check_corpus(cfg: DataConfig, meta: dict, checkpoint: str | Path,
                 allow_changed: bool) -> None:
    """Refuse (or, when ``allow_changed``, warn on stderr) if the corpus differs from the one
    the checkpoint in ``checkpoint`` was trained on: its held-out split would differ too."""
    recorded = meta.get("corpus_sha256")
    if recorded is None or corpus_sha256(cfg) == recorded:
        return
    files = " and ".join(getattr(cfg, name) for name in PATHS if getattr(cfg, name))
    what = (f"the corpus {files} changed since {checkpoint} was trained on it, so its "
            "held-out split is no longer the one the run validated on")
    if not allow_changed:
        raise UsageError(f"{what}; pass --allow-changed-data to go on anyway")
    say(f"warning: {what} (going on: --allow-changed-data)")
