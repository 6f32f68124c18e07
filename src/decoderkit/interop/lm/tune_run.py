"""``lm tune``'s run directories and the run itself: a pretrained LM tuned through the one loop
(``training.lm.tune``'s recipe) into a directory that is a PEFT adapter (LoRA), or an
``lm train`` run directory (``--full``).

The adapter run: adapter_config.json and adapter_model.safetensors (``interop.lm.peft``:
``PeftModel.from_pretrained`` and every tool reading PEFT's format take it as it is) beside
meta.json (the step, the history, the data's sha256, the base's path) and trainer.pt (the
optimiser's state of the adapters alone, for ``--resume``), written as every checkpoint is
(``training.checkpoint_dir``: atomic, checksummed, a directory of other files never replaced).

A base without an end-of-text token (an ``lm train`` BPE run) gains GPT-2's <|endoftext|>
(``with_end_of_text``: the tokenizer's next id, the embedding grown by a row where the model
has none spare, as ``lm finetune`` grows GPT-1's), so that a completion ends with it and the
tuned model ends its turn; LoRA trains its row(s) as PEFT's trainable tokens
(``interop.lm.peft_tokens``), and the run keeps the grown tokenizer beside the adapter.
"""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path

import torch
from tokenizers import Tokenizer

from decoderkit.base.errors import UsageError
from decoderkit.interop.lm.peft import ADAPTER_CONFIG, load_adapter, write_adapter_files
from decoderkit.interop.lm.peft_tokens import TOKENIZER, token_config
from decoderkit.nn.lm.classifier import with_new_tokens
from decoderkit.nn.lm.model import DecoderOnlyLM
from decoderkit.nn.lm.lora import resolve_targets
from decoderkit.nn.lora import LoRAConfig
from decoderkit.training import checkpoint_dir, loop
from decoderkit.training.checkpoint_dir import ADAPTER_WEIGHTS, META, TRAINER
from decoderkit.training.lm import checkpoint as lm_checkpoint
from decoderkit.text.lm.chat import ChatTemplate
from decoderkit.generation.lm.checkpoint import LMCheckpoint
from decoderkit.text.lm.tokenizer import BPE, END_OF_TEXT, LMTokenizer
from decoderkit.training.lm.tune import TuneConfig, TuneData, Tuning
from decoderkit.training.lm.tune_data import read_examples

ADAPTER_RUN_FILES = (ADAPTER_CONFIG, ADAPTER_WEIGHTS, META, TRAINER, TOKENIZER)  # what the
# format owns (the tokenizer: where tuning added tokens)
HELD_OUT = 10  # without --valid, every tenth example (at least one) is held out


class AdapterStore:
    """A LoRA run's directory: a PEFT adapter of the base at ``base_path``."""

    files = ADAPTER_RUN_FILES

    def __init__(self, base: DecoderOnlyLM, lora: LoRAConfig, base_path: str,
                 tokenizer: LMTokenizer | None = None, tokens: list[int] = ()):
        self.base, self.lora, self.base_path = base, lora, base_path
        self.tokenizer = tokenizer  # the grown tokenizer, where tuning added tokens
        self.tokens = sorted(tokens)  # the ids whose rows the run trains (a resume's check)

    def save(self, out: Path, model: DecoderOnlyLM, step: int, meta: dict,
             trainer_state: dict) -> None:
        def write(tmp: Path) -> None:
            write_adapter_files(tmp, model, self.lora, self.base_path)
            if self.tokenizer is not None:
                self.tokenizer.save(tmp / TOKENIZER)

        checkpoint_dir.write_directory(out, self.files, write, step=step,
                                       meta=meta | {"base": self.base_path},
                                       trainer_state=trainer_state)

    def load(self, out: Path, device: torch.device):
        path, meta = checkpoint_dir.open_directory(out, self.files)
        model = copy.deepcopy(self.base).to(device)
        saved = load_adapter(path, model)
        check_same_adapter(self.lora, saved, model, out)
        trained = sorted({i for ids in (token_config(model) or {}).values() for i in ids})
        if trained != self.tokens:
            raise UsageError(f"cannot resume: the rows of tokens {self.tokens} are trained "
                             f"here but those of {trained} in the run in {out} (its "
                             "trainable_token_indices; --trainable-tokens and an added "
                             "end-of-text token)")
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


def with_end_of_text(base: LMCheckpoint) -> tuple[LMCheckpoint, list[int]]:
    """(``base``, []) where its tokenizer ends texts; else (a copy whose tokenizer gains
    <|endoftext|> as its next id and whose model has a row for it, [that id]): the embedding
    grown as ``lm finetune`` grows GPT-1's (seeded: the same row each run) unless the model
    has rows past the tokenizer's. ``base`` is left as it was."""
    tokenizer = base.tokenizer
    if tokenizer is None or tokenizer.end_ids or tokenizer.kind != BPE \
            or tokenizer.specials is not None:  # a character vocabulary has no room for it
        return base, []
    grown = LMTokenizer(Tokenizer.from_str(tokenizer.hf.to_str()))
    grown.hf.add_special_tokens([END_OF_TEXT])
    new = grown.hf.token_to_id(END_OF_TEXT)
    model, vocab = base.model, base.model.config.vocab_size
    if new >= vocab:
        with torch.random.fork_rng():
            torch.manual_seed(0)
            model = with_new_tokens(model, new + 1 - vocab)
    return dataclasses.replace(base, model=model, tokenizer=grown), [new]


def tune(base: LMCheckpoint, data: TuneData, cfg: TuneConfig, lora: LoRAConfig | None,
         out: str | Path, *, resume: bool = False, overwrite: bool = False,
         device: str = "auto", show: bool = True, progress: bool = True,
         commands: list[list[str]] | None = None, new_tokens: list[int] = ()
         ) -> loop.LoopResult:
    """Tune ``base`` (left unchanged) on ``data`` by ``lora`` (None: every weight), into
    ``out`` as ``training.loop.run`` does (new, empty or this format's run; ``resume`` it or
    ``overwrite`` it); ``new_tokens`` (``with_end_of_text``'s, and ``lm tune
    --trainable-tokens``'): ids whose rows LoRA trains too (PEFT's trainable tokens), the
    tokenizer then saved beside the adapter."""
    model = base.model
    base_path = str(Path(base.path).resolve())
    store = FullStore(base.tokenizer) if lora is None else AdapterStore(
        model, lora, base_path, base.tokenizer if new_tokens else None, list(new_tokens))
    recipe = Tuning(lambda: copy.deepcopy(model), lora, cfg, data, store, list(new_tokens))
    return loop.run(recipe, cfg, out, resume=resume, overwrite=overwrite,
                    device=device, show=show, progress=progress, commands=commands)
