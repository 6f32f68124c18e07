"""``lm tune``'s run directories and the run itself: a pretrained LM tuned through the one loop
(``training.lm.tune``'s recipe) into a directory that is a PEFT adapter (LoRA), or an
``lm train`` run directory (``--full``).

The adapter run: adapter_config.json and adapter_model.safetensors (``interop.lm.peft``:
``PeftModel.from_pretrained`` and every tool reading PEFT's format take it as it is) beside
meta.json (the step, the history, the data's sha256, the base's path) and trainer.pt (the
optimiser's state of the adapters alone, for ``--resume``), written as every checkpoint is
(``training.checkpoint_dir``: atomic, checksummed, a directory of other files never replaced).
"""

from __future__ import annotations

import copy
from pathlib import Path

import torch

from decoderkit.base.errors import UsageError
from decoderkit.interop.lm.peft import ADAPTER_CONFIG, load_adapter, write_adapter_files
from decoderkit.nn.lm.model import DecoderOnlyLM
from decoderkit.nn.lm.lora import resolve_targets
from decoderkit.nn.lora import LoRAConfig
from decoderkit.training import checkpoint_dir, loop
from decoderkit.training.checkpoint_dir import ADAPTER_WEIGHTS, META, TRAINER
from decoderkit.training.lm import checkpoint as lm_checkpoint
from decoderkit.text.lm.chat import ChatTemplate
from decoderkit.generation.lm.checkpoint import LMCheckpoint
from decoderkit.text.lm.tokenizer import LMTokenizer
from decoderkit.training.lm.tune import TuneConfig, TuneData, Tuning
from decoderkit.training.lm.tune_data import read_examples

ADAPTER_RUN_FILES = (ADAPTER_CONFIG, ADAPTER_WEIGHTS, META, TRAINER)  # what the format owns
HELD_OUT = 10  # without --valid, every tenth example (at least one) is held out


class AdapterStore:
    """A LoRA run's directory: a PEFT adapter of the base at ``base_path``."""

    files = ADAPTER_RUN_FILES

    def __init__(self, base: DecoderOnlyLM, lora: LoRAConfig, base_path: str):
        self.base, self.lora, self.base_path = base, lora, base_path

    def save(self, out: Path, model: DecoderOnlyLM, step: int, meta: dict,
             trainer_state: dict) -> None:
        checkpoint_dir.write_directory(
            out, self.files, lambda tmp: write_adapter_files(tmp, model, self.lora,
                                                             self.base_path),
            step=step, meta=meta | {"base": self.base_path}, trainer_state=trainer_state)

    def load(self, out: Path, device: torch.device):
        path, meta = checkpoint_dir.open_directory(out, self.files)
        model = copy.deepcopy(self.base).to(device)
        saved = load_adapter(path, model)
        check_same_adapter(self.lora, saved, model, out)
        return model, meta, checkpoint_dir.read_trainer_state(path, meta)


def check_same_adapter(given: LoRAConfig, saved: LoRAConfig, model: DecoderOnlyLM,
                       out: Path) -> None:
    """--resume continues the same adapter: r, alpha, dropout, rsLoRA and the linears the
    targets name; the first that differs is refused naming it."""
    for field in ("r", "alpha", "dropout", "rslora"):
        if getattr(given, field) != getattr(saved, field):
            raise UsageError(f"cannot resume: the adapter's {field} is {getattr(given, field)!r}"
                             f" here but {getattr(saved, field)!r} in the run in {out}")
    ours, theirs = (set(resolve_targets(model.config, c.targets)) for c in (given, saved))
    if ours != theirs:
        raise UsageError(f"cannot resume: --targets names {len(ours)} linears here, but the "
                         f"run in {out} adapts {len(theirs)} (its target_modules)")


class FullStore:
    """A full tuning's directory: an ``lm train`` run directory of the whole model."""

    files = lm_checkpoint.FILES

    def __init__(self, tokenizer: LMTokenizer):
        self.tokenizer = tokenizer

    def save(self, out: Path, model: DecoderOnlyLM, step: int, meta: dict,
             trainer_state: dict) -> None:
        lm_checkpoint.save_lm_checkpoint(out, model, self.tokenizer, step=step, meta=meta,
                                         trainer_state=trainer_state)

    def load(self, out: Path, device: torch.device):
        ckpt = lm_checkpoint.load_lm_checkpoint(out, device)
        for p in ckpt.model.parameters():
            p.requires_grad_(True)
        return ckpt.model, ckpt.meta, ckpt.trainer_state()


def tune_data(base: LMCheckpoint, template: ChatTemplate | None, data: str | Path,
              valid: str | Path | None, loss: str) -> TuneData:
    """The examples of ``data`` (and of ``valid``, else every ``HELD_OUT``-th of ``data``)
    for ``base``'s tokenizer, template and context."""
    if base.tokenizer is None:
        raise UsageError(f"--checkpoint {base.path} has no tokenizer: lm tune reads text")
    context = base.config.max_len
    kind, examples = read_examples(data, base.tokenizer, template, loss, context)
    if valid is not None:
        held = read_examples(valid, base.tokenizer, template, loss, context)[1]
        return TuneData(examples, held, kind, [str(data), str(valid)])
    if len(examples) < 2:
        raise UsageError(f"--data {data} holds {len(examples)} example: give at least 2 (one "
                         "is held out), or --valid")
    if len(examples) < HELD_OUT:
        return TuneData(examples[:-1], examples[-1:], kind, [str(data)])
    every = [i % HELD_OUT == HELD_OUT - 1 for i in range(len(examples))]
    return TuneData([e for e, out in zip(examples, every, strict=True) if not out],
                    [e for e, out in zip(examples, every, strict=True) if out], kind, [str(data)])


def tune(base: LMCheckpoint, data: TuneData, cfg: TuneConfig, lora: LoRAConfig | None,
         out: str | Path, *, resume: bool = False, overwrite: bool = False,
         device: str = "auto", show: bool = True, progress: bool = True,
         commands: list[list[str]] | None = None) -> loop.LoopResult:
    """Tune ``base`` (left unchanged) on ``data`` by ``lora`` (None: every weight), into
    ``out`` as ``training.loop.run`` does (new, empty or this format's run; ``resume`` it or
    ``overwrite`` it)."""
    model = base.model
    base_path = str(Path(base.path).resolve())
    store = FullStore(base.tokenizer) if lora is None else AdapterStore(model, lora, base_path)
    recipe = Tuning(lambda: copy.deepcopy(model), lora, cfg, data, store)
    return loop.run(recipe, cfg, out, resume=resume, overwrite=overwrite,
                    device=device, show=show, progress=progress, commands=commands)
