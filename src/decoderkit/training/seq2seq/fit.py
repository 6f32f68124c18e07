"""The encoder-decoder training run: its recipe for ``training.loop`` (the model, label-smoothed
teacher forcing, Adam under the warm-up schedule, length-bucketed batches, validation by loss,
exact match, BLEU and chrF, early stop), on data from ``training.seq2seq.prepare``. ``decoderkit
train`` is a thin wrapper over this. Resume is exact (see ``training.loop``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import torch

from decoderkit.base.checks import (
    FRACTION,
    POSITIVE,
    RATE,
    SEED,
    Range,
    check_fields,
    check_step_tokens,
    count,
    size,
)
from decoderkit.base.errors import UsageError
from decoderkit.nn.seq2seq.model import EncoderDecoder, ModelConfig
from decoderkit.training import distributed, loop
from decoderkit.training.resume import (
    MAY_CHANGE as EVERY_RUN_MAY_CHANGE,
    check_same,
    check_settings,
)
from decoderkit.training.seq2seq.checkpoint import FILES, load_checkpoint, save_checkpoint
from decoderkit.training.seq2seq.data import Pair, bucket_batches, make_batch, shard
from decoderkit.training.seq2seq.evaluation import Metrics, evaluate
from decoderkit.training.objective import LabelSmoothingLoss, make_optimizer
from decoderkit.training.seq2seq.objective import TeacherForced
from decoderkit.training.seq2seq.prepare import (  # noqa: F401 (DataConfig, prepare_data: public here)
    DataConfig,
    Prepared,
    check_corpus,
    data_meta,
    prepare_data,
    recorded_data,
)


@dataclass(frozen=True)
class TrainConfig:
    """How to train; see ``decoderkit train --help`` for the meaning of each flag."""

    batch_size: int = 64  # sentences per micro-batch (per process)
    accum: int = 1  # micro-batches per optimiser step
    max_steps: int = 2000  # optimiser steps in all (a resumed run counts the earlier ones)
    time_limit: float | None = None  # seconds of training in this invocation, then stop
    warmup: int = 400  # noam warm-up steps w
    lr_factor: float = 1.0  # noam factor
    smoothing: float = 0.1  # label smoothing eps (uniform convention)
    clip: float | None = 1.0  # max gradient norm; None: no clipping
    valid_every: int = 200  # steps between validations (each also saves a checkpoint)
    patience: int = 0  # stop after this many validations without a lower loss; 0: never
    target_exact: float | None = None  # stop once held-out exact match reaches this
    seed: int = 0  # model initialisation, dropout and batch order
    ema: float | None = None  # decay of the moving average of the weights that validation and
    # checkpoints hold (training.loop's ``ema_decay``); None: the trained weights themselves

    def __post_init__(self):
        check_fields(self, TRAIN_RANGES, optional=("time_limit", "clip", "target_exact", "ema"))


TRAIN_RANGES = {  # what each TrainConfig field accepts (the train command's flags use these)
    "batch_size": size(), "accum": size(), "max_steps": count(), "time_limit": POSITIVE,
    "warmup": count(), "lr_factor": RATE, "smoothing": FRACTION, "clip": POSITIVE,
    "valid_every": count(), "patience": count(0), "target_exact": Range(False, 0.0, 1.0),
    "seed": SEED, "ema": Range(False, 0.0, 1.0, low_open=True, high_open=True)}


MAY_CHANGE = (*EVERY_RUN_MAY_CHANGE, "target_exact")  # what --resume may set anew


def fit(config: ModelConfig, cfg: TrainConfig, data: Prepared, out: str | Path, *,
        resume: bool = False, overwrite: bool = False, device: str = "auto", show: int = 5,
        progress: bool = True, allow_changed_data: bool = False,
        commands: list[list[str]] | None = None) -> loop.LoopResult:
    """Train, validating and checkpointing to ``out`` (rank 0 only writes, holding its lock).

    ``out`` must be new, empty or a checkpoint (``--resume`` it, or ``overwrite`` it);
    resuming on a corpus other than the checkpoint's is refused unless ``allow_changed_data``.
    ``commands``: the command lines that made the run, kept with it (``loop.run``).
    """
    check_step_tokens(cfg.batch_size, cfg.accum, config.max_len, "batch_size x accum x max_len")
    recipe = Seq2Seq(config, cfg, data, allow_changed_data, show)
    return loop.run(recipe, cfg, out, resume=resume, overwrite=overwrite, device=device,
                    show=bool(show), progress=progress, commands=commands)


class Seq2Seq:
    """The encoder-decoder's ``training.loop.Recipe``."""

    files = FILES
    keep_best = False  # every validation checkpoints the current state

    def __init__(self, config: ModelConfig, cfg: TrainConfig, data: Prepared,
                 allow_changed_data: bool, show: int):
        self.config, self.cfg, self.data = config, cfg, data
        self.ema_decay = cfg.ema
        self.allow_changed_data, self.show = allow_changed_data, show
        self.hyps: list[str] = []  # the last validation's translations
        self.origin: dict = {}  # a converted model's record, kept by its runs

    def new_model(self) -> EncoderDecoder:
        return EncoderDecoder(self.config)

    def resume(self, out: Path, device: torch.device):
        ckpt = load_checkpoint(out, device)
        check_same("model", dataclasses.asdict(self.config), ckpt.config.to_dict(), out)
        if not first_data(ckpt.meta):
            check_same("data", data_meta(self.data.config, out)["data"],
                            data_meta(recorded_data(ckpt.meta, out), out)["data"], out)
            check_corpus(self.data.config, ckpt.meta, out, self.allow_changed_data)
        check_settings(self.cfg, ckpt.meta.get("train", {}), out, MAY_CHANGE)
        self.origin = {k: ckpt.meta[k] for k in ORIGIN_KEYS if k in ckpt.meta}
        return ckpt.model, ckpt.step, ckpt.meta.get("history", []), ckpt.trainer_state()

    def objective(self, model: EncoderDecoder) -> TeacherForced:
        criterion = LabelSmoothingLoss(self.cfg.smoothing, ignore_index=self.config.pad_id,
                                       reduction="sum")
        keep_start_row(model)
        return TeacherForced(model, criterion)

    def optimizer(self, model: EncoderDecoder):
        return make_optimizer(model, self.config.d_model, self.cfg.warmup, self.cfg.lr_factor)

    def batches(self, start: int, ctx: distributed.Context):
        return _micro_batches(self.data.train, self.cfg, ctx, start, self.config)

    def validate(self, model: EncoderDecoder) -> Metrics:
        metrics, self.hyps = evaluate(model, self.data.valid,
                                      [t for _, t in self.data.valid_texts],
                                      self.data.tgt_tokenizer,
                                      batch_size=2 * self.cfg.batch_size)
        return metrics

    def stop_reason(self, metrics: Metrics, bad: int) -> str | None:
        """Why to stop early after this validation (None: go on)."""
        reached = self.cfg.target_exact is not None and \
            metrics.exact_match >= self.cfg.target_exact
        return loop.patience_spent(self.cfg.patience, bad) or (
            "target exact match" if reached else None)

    def meta(self, out: Path) -> dict:
        return data_meta(self.data.config, out)

    def save(self, out: Path, model: EncoderDecoder, step: int, meta: dict,
             trainer_state: dict) -> None:
        save_checkpoint(out, model, self.data.src_tokenizer, self.data.tgt_tokenizer,
                        step=step, meta={**meta, **self.origin}, trainer_state=trainer_state)

    def report(self, metrics: Metrics, step: int, out: str | Path) -> None:
        print(f"\nHeld-out translations after {step} steps:")
        for (src, ref), hyp in list(zip(self.data.valid_texts, self.hyps,
                                        strict=True))[:self.show]:
            mark = "✓" if hyp == ref else f"✗ (expected {ref})"
            print(f"  {src!r:>32} -> {hyp} {mark}")
        print(f"Exact match on {len(self.hyps)} held-out pairs: "
              f"{100 * metrics.exact_match:.2f}%")
        print(f"Checkpoint: {out}")


ORIGIN_KEYS = ("origin", "converted_from")  # meta of a converted checkpoint, kept by its runs


def keep_start_row(model: EncoderDecoder) -> None:
    """A model that starts decoding from its pad token (Marian's: an all-zero vector, read in as
    the row of id pad_id; the source's, of id source_pad_id) keeps those rows as they are while
    training, and the output layer's row and bias of pad_id (its probability exactly 0): their
    gradient is zeroed (as ``nn.Embedding``'s ``padding_idx``), so a fine-tuned Marian model
    still starts from Marian's zero vector (and ``export --to marian`` can write it). Others
    are unchanged."""
    c = model.config
    if c.bos_id != c.pad_id:
        return
    rows: dict[int, tuple[torch.nn.Parameter, set[int]]] = {}
    for weight, row in ((model.src_embed.lut.weight, c.source_pad_id),
                        (model.tgt_embed.lut.weight, c.pad_id),
                        (model.generator.proj.weight, c.pad_id),
                        (model.generator.proj.bias, c.pad_id)):
        rows.setdefault(id(weight), (weight, set()))[1].add(row)
    for weight, kept in rows.values():
        index = torch.tensor(sorted(kept))
        weight.register_hook(lambda grad, i=index: grad.index_fill(0, i.to(grad.device), 0.0))


def first_data(meta: dict) -> bool:
    """True for a checkpoint that was never trained here (``decoderkit convert`` wrote it): it
    records no data, so ``--resume`` fine-tunes it on the data given, with its own model config
    and tokenizers, a fresh optimiser and schedule."""
    return meta.get("data") is None


def _micro_batches(train: list[Pair], cfg: TrainConfig, ctx: distributed.Context, start: int,
                   config: ModelConfig):
    """Endless micro-batches from position ``start``; epoch e's order is fixed by (seed, e)."""
    lengths = [max(len(s), len(t)) for s, t in train]

    def epoch(e: int) -> list[list[int]]:
        return shard(bucket_batches(lengths, cfg.batch_size, seed=cfg.seed * 100_003 + e),
                     ctx.rank, ctx.world)

    per_epoch = len(epoch(0))
    if per_epoch == 0:
        raise UsageError(f"{len(train)} training pairs are too few for batch_size "
                         f"{cfg.batch_size} on {ctx.world} process(es)")
    e, pos = divmod(start, per_epoch)
    while True:
        for idx in epoch(e)[pos:]:
            yield make_batch([train[i] for i in idx], config.pad_id, config.bos_id,
                             config.eos_id, config.source_pad_id)
        e, pos = e + 1, 0
