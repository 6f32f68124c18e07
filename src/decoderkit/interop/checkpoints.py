"""The one opener: every model path any command accepts, whatever wrote it, is opened here
(``decoderkit.load_checkpoint`` is ``load_checkpoint``), and every ``--checkpoint`` goes
through it. A command of the other family is refused in one line naming the right command.

Formats (``FORMATS``, looked at in this order; the first whose ``detect`` is true reads it):
a fine-tuned classifier (``lm finetune``), an ``lm train`` run directory, a Hugging Face
Marian directory (``interop.marian``), Marian's own ``model.npz`` or a directory holding one
(``interop.marian.npz``), a Hugging Face GPT2ForSequenceClassification directory
(``interop.gpt.classifier``), a Hugging Face GPT-2 / OpenAI GPT directory
(``interop.gpt.hf``), a Hugging Face Llama / Mistral / Qwen2 / Qwen3 directory
(``interop.llama.hf``), a GGUF file, a directory holding one or an Ollama model name
(``interop.gguf.open``), a nanoGPT ``ckpt.pt`` or its directory (``interop.gpt.nanogpt``), and a
decoderkit translation checkpoint (``train``). Each opens as its family's checkpoint object:
``Checkpoint`` (translation: ``.model``, ``.config``, ``.src_tokenizer``, ``.tgt_tokenizer``)
or ``LMCheckpoint`` (``.model``, ``.config``, ``.tokenizer``, None where a foreign model has
none). ``convert_checkpoint`` writes any translation format as a decoderkit checkpoint.

Adding a format is a name map plus a config translation, in the format's own module of
``interop`` (``interop.marian.npz`` is an example):

1. ``is_X(path) -> bool``: a cheap look (a file name, a config key) that never raises.
2. ``read_X_config(path) -> ModelConfig | LMConfig``: what decoderkit cannot express is refused
   naming the file and the key.
3. ``X_names(config) -> nn.weights.NameMap``: our state-dict name -> ``Source`` (the file's
   tensor names, concatenated rows, transposed, a default), with the names to ignore.
4. ``load_X(path, map_location) -> Checkpoint | LMCheckpoint``: call
   ``nn.weights.load_file(config, ModelClass, FILE, X_names(config), "CONFIG FILE")``: it
   checks the config's claim against the file first (a config claiming more parameters than
   the file holds is refused before the model is built), builds the model, reads the tensors
   (safetensors, ``weights_only`` .bin/.pt, .npz by the suffix), maps them and refuses, in one
   line naming the file and the tensor, a missing, left-over or misshapen one, a NaN or inf,
   an integer or a non-tensor value; then the tokenizers.
5. One ``Format(what, holds, family, is_X, load_X, read_X_config)`` line in ``FORMATS``,
   before any format whose ``detect`` would also take it (ours last: it takes any directory
   holding a model.safetensors); a Hugging Face format lists the ``model_types`` it reads
   (a Hugging Face directory of any other model_type is refused naming those of every line).

``identify`` says what any model path is (these formats, exports, a Hugging Face directory of
a model_type no format reads) and which command takes it, or what runs it instead: refusals of
a path holding the wrong thing (``find_format``, ``check_run``, ``check_export``) name it so.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from decoderkit.base.errors import UsageError
from decoderkit.base.families import CLASSIFIER, LM, SEQ2SEQ, family
from decoderkit.base.moved import forward
from decoderkit.interop.gpt import classifier as hf_gpt_classifier
from decoderkit.interop.gpt import hf as hf_gpt
from decoderkit.interop.gpt import nanogpt
from decoderkit.interop.gguf import open as gguf
from decoderkit.interop.gguf.detect import is_gguf
from decoderkit.interop.llama import hf as llama
from decoderkit.interop.marian import hf as marian
from decoderkit.interop.marian import npz as marian_npz
from decoderkit.base.files import describe
from decoderkit.base.model_files import check_model_files
from decoderkit.generation.lm.defaults import NO_DEFAULTS
from decoderkit.interop.artifacts import exported_for
from decoderkit.interop.huggingface import config_problem, hf_model_type
from decoderkit.interop.lm import peft
from decoderkit.interop.lm.directory import read_generation
from decoderkit.nn.seq2seq.model import ModelConfig
from decoderkit.nn.lm.model import DecoderOnlyLM, LMConfig
from decoderkit.training import checkpoint_dir
from decoderkit.training.lm import checkpoint as lm_checkpoint
from decoderkit.training.lm import classifier_checkpoint
from decoderkit.generation.lm.checkpoint import LMCheckpoint
from decoderkit.text.lm.tokenizer import LMTokenizer
from decoderkit.training.seq2seq import checkpoint
from decoderkit.training.rundir import claimed
from decoderkit.training.seq2seq.checkpoint import FILES, Checkpoint, save_checkpoint

# family -> (what a model of it is, the command that takes it)
FAMILIES = {SEQ2SEQ: ("a translation model", "decoderkit translate"),
            LM: ("a language model", "decoderkit lm sample"),
            CLASSIFIER: ("a fine-tuned classifier", "decoderkit lm classify")}
Loaded = Checkpoint | LMCheckpoint
__getattr__ = forward(__name__)  # its TRANSLATION, now base.families.SEQ2SEQ


@dataclass(frozen=True)
class Format:
    """One kind of model path decoderkit opens."""

    what: str  # the kind, in messages: "a Hugging Face Marian directory"
    holds: str  # what marks it, for a path that is no model: "config.json model_type marian"
    family: str  # a family of base.families
    detect: Callable[[Path], bool]  # a cheap look that never raises
    load: Callable[[Path, str | torch.device], Loaded]  # the model in eval mode on the device
    config: Callable[[Path], ModelConfig | LMConfig]  # its config, weights unread (nanoGPT: read)
    model_types: tuple[str, ...] = ()  # a Hugging Face directory's config.json model_types
    trains: str | None = None  # the command whose --resume goes on with it (our run directories)


def _own_config(config_type: type, name: str) -> Callable[[Path], ModelConfig | LMConfig]:
    """The config file ``name`` of one of our run directories (after a crash mid-save: the
    previous one's)."""
    def read(path: Path):
        return checkpoint_dir.read_config((checkpoint_dir.resolve(path) or path) / name,
                                          config_type)
    return read


def _foreign(read: Callable[[Path], tuple[nn.Module, LMTokenizer | None]], origin: str,
             generation: bool = False) -> Callable[[Path, str | torch.device], LMCheckpoint]:
    """A loader of (model, tokenizer) as an ``LMCheckpoint`` at step 0 (``meta["origin"]``);
    with ``generation``, the directory's generation settings (``interop.lm.directory``)."""
    def load(path: Path, map_location: str | torch.device) -> LMCheckpoint:
        model, tokenizer = read(path)
        settings = read_generation(path, model.config.vocab_size) if generation else \
            NO_DEFAULTS
        return LMCheckpoint(model.to(map_location), tokenizer, 0, path,
                            {"step": 0, "origin": origin}, settings)
    return load


GGUF = Format("a GGUF file (llama.cpp's format; or a directory holding one, an Ollama name)",
              "a .gguf file", LM, is_gguf, gguf.load_gguf, gguf.read_gguf_config)
FORMATS = (
    Format("a LoRA adapter directory (PEFT's; lm tune)", "adapter_config.json", LM,
           peft.is_adapter, lambda p, to: load_checkpoint(peft.adapter_base(p), to, adapter=p),
           lambda p: checkpoint_config(peft.adapter_base(p)), trains="decoderkit lm tune"),
    Format("an lm finetune run directory", "classifier.json, meta.json", CLASSIFIER,
           classifier_checkpoint.is_classifier_checkpoint,
           classifier_checkpoint.open_classifier_checkpoint,
           _own_config(LMConfig, lm_checkpoint.CONFIG), trains="decoderkit lm finetune"),
    Format("an lm train run directory", "model.safetensors, meta.json, tokenizer.json", LM,
           lm_checkpoint.is_lm_checkpoint, lm_checkpoint.load_lm_checkpoint,
           _own_config(LMConfig, lm_checkpoint.CONFIG), trains="decoderkit lm train"),
    Format("a Hugging Face Marian directory", "config.json model_type marian", SEQ2SEQ,
           marian.is_marian_directory, marian.load_marian, lambda p: marian.read_config(p)[0],
           (marian.ORIGIN,)),
    Format("a Marian model.npz (or its directory)", "model.npz, model.npz.decoder.yml",
           SEQ2SEQ, marian_npz.is_marian_npz, marian_npz.load_marian_npz,
           marian_npz.read_config),
    Format("a Hugging Face GPT2ForSequenceClassification directory",
           "config.json architectures GPT2ForSequenceClassification", CLASSIFIER,
           hf_gpt_classifier.is_hf_classifier,
           _foreign(hf_gpt_classifier.load_hf_classifier, "transformers"),
           lambda p: hf_gpt.read_hf_config(p)[0], (hf_gpt.GPT2,)),
    Format("a Hugging Face GPT-2 / OpenAI GPT directory",
           "config.json model_type gpt2 or openai-gpt", LM, hf_gpt.is_hf_gpt_directory,
           _foreign(hf_gpt.load_hf_gpt, "transformers", generation=True),
           lambda p: hf_gpt.read_hf_config(p)[0], tuple(hf_gpt.DEFAULTS)),
    Format("a Hugging Face Llama-family directory",
           "config.json model_type llama, mistral, qwen2 or qwen3", LM,
           llama.is_llama_directory, _foreign(llama.load_llama, "transformers", generation=True),
           llama.read_llama_config, tuple(llama.DEFAULTS)),
    GGUF,
    Format("a nanoGPT ckpt.pt", "ckpt.pt", LM, nanogpt.is_nanogpt_checkpoint,
           _foreign(nanogpt.load_nanogpt, "nanogpt"),
           lambda p: nanogpt.load_nanogpt(p)[0].config),
    Format("a decoderkit translation checkpoint (train)", "model.safetensors, meta.json, "
           "config.json", SEQ2SEQ, checkpoint_dir.has_checkpoint, checkpoint.load_checkpoint,
           _own_config(ModelConfig, checkpoint.CONFIG), trains="decoderkit train"),
)
# an export's manifest engine -> (what the export is, the command line that takes it)
EXPORTS = {"ctranslate2": ("a CTranslate2 export (decoderkit export --to ctranslate2)",
                           "decoderkit translate --engine ctranslate2 --model"),
           "onnxruntime": ("an ONNX export (decoderkit export --to onnx)",
                           "decoderkit translate --engine onnxruntime --model")}


def _unread(kind: str, formats: list[Format] | None = None) -> str:
    """A Hugging Face directory of model_type ``kind`` that none of ``formats`` (None: all of
    ``FORMATS``) reads, and the model_types they do read, in words."""
    types = ", ".join(dict.fromkeys(t for f in formats or FORMATS for t in f.model_types))
    return (f"a Hugging Face directory of model_type {kind!r}, which decoderkit does not read "
            f"(it reads model_type {types})")


def detected(path: str | Path) -> Format | None:
    """The first format in ``FORMATS`` that takes ``path`` (a cheap look), or None; a Hugging
    Face directory only by a format that lists its model_type."""
    kind = hf_model_type(path)
    return next((f for f in FORMATS if (kind is None or kind in f.model_types)
                 and f.detect(Path(path))), None)


@dataclass(frozen=True)
class Kind:
    """What a model path is, in words, and the command that takes it."""

    what: str  # "an lm train run directory"
    family: str | None  # a family of base.families; None: no model decoderkit reads
    use: str | None  # the command line that takes it, up to its path: "decoderkit lm sample
    # --checkpoint"; None: none does
    trains: str | None = None  # the command whose --resume goes on with it
    engine: str | None = None  # the engine of an export (EXPORTS)
    instead: str | None = None  # where no command takes it: what runs it instead

    def __str__(self) -> str:
        return self.what if self.family is None else f"{self.what}, {FAMILIES[self.family][0]}"


def identify(path: str | Path) -> Kind | None:
    """What the model at ``path`` is (a cheap look, nothing loaded), or None where decoderkit
    sees no model there: one of ``FORMATS``, an export or a Hugging Face directory of a
    model_type no format reads."""
    fmt = detected(path)
    if fmt is not None:
        return Kind(fmt.what, fmt.family, f"{FAMILIES[fmt.family][1]} --checkpoint", fmt.trains)
    engine = exported_for(path)
    if engine in EXPORTS:
        return Kind(EXPORTS[engine][0], SEQ2SEQ, EXPORTS[engine][1], engine=engine)
    kind = hf_model_type(path)
    if kind is None:
        return None
    return Kind(_unread(kind), None, None)


def family_of(path: str | Path) -> str | None:
    """The family of the model at ``path`` (nothing loaded), None if none is there: for a
    command that serves either family to pick before reading anything."""
    fmt = detected(path)
    return None if fmt is None else fmt.family


def find_format(path: str | Path, families: tuple[str, ...] = (),
                use: dict[str, str] | None = None, flag: str = "--checkpoint") -> Format:
    """The format of the model at ``path``, one of ``families`` (empty: any). A model of
    another family is refused naming the command that takes it (``use``: family -> command,
    else ``FAMILIES``'); no model at all is refused naming what would be."""
    path = Path(path)
    try:
        check_model_files(path)  # no file of it a link to outside it
    except UsageError as err:
        raise UsageError(f"{flag} {err}") from None
    fmt, families = detected(path), tuple(map(family, families))
    accepted = [f for f in FORMATS if not families or f.family in families]
    kind = describe(path)
    if fmt is None and kind == "does not exist":
        raise UsageError(f"{flag} {path}: no such file or directory (no checkpoint in it)")
    if fmt is None and kind not in (None, "is a directory"):  # a pipe, a device, a loop
        raise UsageError(f"{flag} {path} {kind}: no checkpoint there")
    found = identify(path) if fmt is None else None
    if found is not None and found.engine is not None:
        fits = f"use `{found.use} {path}`" if found.use else found.instead
        raise UsageError(f"{flag} {path} is {found}, not a checkpoint; {fits}")
    problem = config_problem(path) if kind == "is a directory" else None
    if problem:  # a Hugging Face directory whose config.json is damaged
        raise UsageError(f"{flag} {path}: {problem}")
    if fmt is None:
        hf = hf_model_type(path)
        if hf is not None:
            raise UsageError(f"{flag} {path}: {_unread(hf, accepted)}")
        kinds = "; ".join(f"{f.what} ({f.holds})" for f in accepted)
        raise UsageError(f"{flag} {path}: no checkpoint in it (decoderkit reads {kinds})")
    if fmt not in accepted:
        wanted = " or ".join(dict.fromkeys(FAMILIES[f.family][0] for f in accepted))
        noun, command = FAMILIES[fmt.family]
        command = (use or {}).get(fmt.family, command)
        raise UsageError(f"{flag} {path} is not {wanted}: it is {fmt.what}, {noun}; use "
                         f"`{command}`")
    return fmt


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu", *,
                    families: tuple[str, ...] = (), use: dict[str, str] | None = None,
                    adapter: str | Path | None = None, fmt: Format | None = None) -> Loaded:
    """The model at ``path`` (see the module docstring), in eval mode on ``map_location``;
    ``families``/``use`` as ``find_format`` (``fmt``: what it found already); ``adapter``: a
    LoRA adapter merged in (``interop.lm.peft.with_adapter``)."""
    loaded = (fmt or find_format(path, families, use)).load(Path(path), map_location)
    if adapter is not None:  # the tuned model, the adapter's name in its meta
        peft.with_adapter(loaded, adapter)
    return loaded


def checkpoint_config(path: str | Path, *, families: tuple[str, ...] = (),
                      use: dict[str, str] | None = None) -> ModelConfig | LMConfig:
    """The config of the model at ``path``, without loading its weights (a nanoGPT ckpt.pt is
    read whole: its config and weights are one file)."""
    return find_format(path, families, use).config(Path(path))


def load_pretrained(path: str | Path) -> tuple[DecoderOnlyLM, LMTokenizer | None]:
    """(model in eval mode, its tokenizer or None) of the decoder-only LM at ``path``: the
    0.2 API, ``load_checkpoint(path, families=(LM,))`` as a pair."""
    ckpt = load_checkpoint(path, families=(LM,))
    return ckpt.model, ckpt.tokenizer


def convert_checkpoint(path: str | Path, out: str | Path, overwrite: bool = False) -> Path:
    """Write the translation model at ``path`` (any format ``load_checkpoint`` opens) as a
    decoderkit checkpoint ``out`` (step 0, no training data recorded: ``train --resume --out
    OUT --data TSV`` fine-tunes it). ``out`` follows a training run's rules: new or empty, or
    with ``overwrite`` a checkpoint; held under its lock."""
    ckpt = load_checkpoint(path, families=(SEQ2SEQ,))
    with claimed(out, resume=False, overwrite=overwrite, files=FILES) as real:
        return save_checkpoint(real, ckpt.model, ckpt.src_tokenizer, ckpt.tgt_tokenizer,
                               step=0, meta={k: v for k, v in ckpt.meta.items() if k != "step"})
