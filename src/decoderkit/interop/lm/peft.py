"""LoRA adapters in PEFT's format, the directory ``peft.PeftModel.from_pretrained`` (and
vLLM, llama.cpp's converter, TRL) read: written from an adapted LM and read onto one.

Layout of an adapter directory::

    adapter_config.json         PEFT's LoraConfig: peft_type LORA, task_type CAUSAL_LM, r,
                                lora_alpha, lora_dropout, target_modules, bias "none",
                                use_rslora, base_model_name_or_path
    adapter_model.safetensors   base_model.model.<module>.lora_A.weight (r, in) and
                                .lora_B.weight (out, r) for each adapted module, named as in
                                the transformers model (``nn.lm.lora.linear_names``)

Reading, the files are foreign: both regular and bounded (the config 1 MiB; the tensors at
most what the targets' A and B hold in float64, plus 1 MiB of header), every key of the
config read with its type and bounds, what PEFT's LoRA can do and ours cannot (DoRA, rank or
alpha patterns, extra trained modules, layer selections, biases) refused naming the key, and
the tensors' names and shapes checked against the model from the header, before any is read:
an adapter of another base (another architecture's names, more layers, other widths) is
refused naming the difference.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from pathlib import Path

import torch
from safetensors.torch import save_file

from decoderkit.base.checks import FRACTION, POSITIVE, count
from decoderkit.base.errors import UsageError
from decoderkit.base.files import check_input_file, describe, write_atomic
from decoderkit.base.text import read_json
from decoderkit.interop.fields import read_field, shown
from decoderkit.generation.lm.checkpoint import LMCheckpoint
from decoderkit.interop.lm.peft_tokens import (DELTA, adapter_tokenizer, load_token_rows,
                                               read_token_indices, token_config, token_ids,
                                               token_shapes, token_tensors)
from decoderkit.nn.lm.classifier import with_new_tokens
from decoderkit.nn.lm.model import DecoderOnlyLM, LMConfig
from decoderkit.nn.lm.lora import (
    adapted,
    add_lora,
    layout,
    linear_names,
    merge_lora,
    resolve_targets,
    short_names,
)
from decoderkit.nn.lora import ALL_LINEAR, LoRAConfig
from decoderkit.nn.stored import open_stored
from decoderkit.nn.weights import check_tensor
from decoderkit.training.checkpoint_dir import ADAPTER_WEIGHTS

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_FILES = (ADAPTER_CONFIG, ADAPTER_WEIGHTS)
PREFIX = "base_model.model."  # PeftModel's prefix of the transformers model's names
A, B = ".lora_A.weight", ".lora_B.weight"
CONFIG_BYTES = 1 << 20  # the largest adapter_config.json read
HEADER_BYTES = 1 << 20  # room for the safetensors header beside an adapter's tensors
# PEFT keys whose non-default values change what the adapter computes, and the default
UNSUPPORTED = {"use_dora": False, "rank_pattern": {}, "alpha_pattern": {},
               "modules_to_save": None, "layers_to_transform": None, "layers_pattern": None,
               "exclude_modules": None, "target_parameters": None, "lora_bias": False,
               "use_qalora": False}


@dataclass(frozen=True)
class Adapter:
    """An adapter directory read: its settings, the base it names, and where its tensors are."""

    lora: LoRAConfig  # r, alpha, dropout, rsLoRA and the targets as the file names them
    base: str | None  # base_model_name_or_path: the base it was trained on (a path or hub name)
    directory: Path
    pattern: str | None = None  # target_modules given as a regular expression (lora's
    # targets are then those it matches on the model: ``for_model``)
    tokens: dict[str, tuple[int, ...]] | None = None  # trainable_token_indices: new tokens'
    # rows it trained (``interop.lm.peft_tokens``)

    def for_model(self, config: LMConfig) -> LoRAConfig:
        """The adapter's settings on a model of ``config``: a pattern's targets resolved to
        the full names it matches there."""
        if self.pattern is None:
            return self.lora
        return replace(self.lora, targets=tuple(resolve_targets(config, self.pattern)))


def peft_config(lora: LoRAConfig, config: LMConfig, base: str | None,
                tokens: dict[str, list[int]] | None = None) -> dict:
    """adapter_config.json of an adapter ``lora`` on a model of ``config`` (PEFT's keys; the
    targets as given, the default written out, all-linear as the linears' names)."""
    targets = lora.targets
    if targets is None or tuple(targets) == (ALL_LINEAR,):
        chosen = resolve_targets(config, targets)
        targets = [n for n in short_names(config) if any(k.endswith("." + n) for k in chosen)]
    return {"peft_type": "LORA", "task_type": "CAUSAL_LM", "base_model_name_or_path": base,
            "r": lora.r, "lora_alpha": lora.alpha, "lora_dropout": lora.dropout,
            "target_modules": sorted(targets), "bias": "none", "use_rslora": lora.rslora,
            "fan_in_fan_out": layout(config) == "gpt2", "inference_mode": True,
            "init_lora_weights": True, **UNSUPPORTED, "trainable_token_indices": tokens}


def adapter_tensors(model: DecoderOnlyLM) -> dict[str, torch.Tensor]:
    """PEFT's tensors of ``model``'s adapters: A (r, in) and B (out, r) of each module."""
    out = {}
    for name, (layer, part) in adapted(model).items():
        out[PREFIX + name + A] = layer.lora_A[part].detach().to("cpu").contiguous().clone()
        out[PREFIX + name + B] = layer.lora_B[part].detach().to("cpu").contiguous().clone()
    out |= token_tensors(model, PREFIX)
    if not out:
        raise UsageError("this model has no LoRA adapter to save")
    return out


def write_adapter_files(directory: Path, model: DecoderOnlyLM, lora: LoRAConfig,
                        base: str | None) -> None:
    """adapter_config.json and adapter_model.safetensors into ``directory`` (each written to
    a temporary name and renamed; the caller owns the directory)."""
    tensors = adapter_tensors(model)
    text = json.dumps(peft_config(lora, model.config, base, token_config(model)), indent=2)
    write_atomic(directory / ADAPTER_WEIGHTS,
                 lambda f: save_file(tensors, str(f), metadata={"format": "pt"}))
    write_atomic(directory / ADAPTER_CONFIG, lambda f: f.write_text(text))


def is_adapter(directory: str | Path) -> bool:
    """True if ``directory`` holds an adapter_config.json (a cheap look that never raises)."""
    try:
        return (Path(directory) / ADAPTER_CONFIG).is_file()
    except OSError:
        return False


def read_adapter(directory: str | Path) -> Adapter:
    """The settings of the adapter in ``directory``, each key checked (see the module
    docstring); the tensors are read by ``load_adapter``."""
    directory = Path(directory)
    file = directory / ADAPTER_CONFIG
    raw = read_json(check_input_file(file, "the adapter config", CONFIG_BYTES), ADAPTER_CONFIG,
                    CONFIG_BYTES)
    if not isinstance(raw, dict):
        raise UsageError(f"{file}: must be a JSON object, got {type(raw).__name__}")

    def get(key, want, **kw):
        return read_field(raw, key, want, file, **kw)

    get("peft_type", ("LORA",))
    get("task_type", ("CAUSAL_LM",), default="CAUSAL_LM", nullable=True)
    get("bias", ("none",), default="none")
    for key, default in UNSUPPORTED.items():
        if raw.get(key, default) not in (default, None, {}, [], False):
            raise UsageError(f"{file}: {key}={shown(raw[key])} is not supported (decoderkit "
                             f"reads plain LoRA: {key} {json.dumps(default)})")
    targets = raw.get("target_modules")
    if isinstance(targets, list):
        targets = tuple(targets)
    elif not isinstance(targets, str):
        raise UsageError(f"{file}: target_modules must be a list of module names or a "
                         f"regular expression, got {shown(targets)}")
    try:
        lora = LoRAConfig(r=get("r", count(1)), alpha=get("lora_alpha", POSITIVE),
                          dropout=get("lora_dropout", FRACTION, default=0.0),
                          targets=None if isinstance(targets, str) else targets,
                          rslora=get("use_rslora", bool, default=False))
    except UsageError as err:
        raise UsageError(f"{file}: {err}") from None
    base = get("base_model_name_or_path", str, default=None, nullable=True)
    return Adapter(lora, base, directory, targets if isinstance(targets, str) else None,
                   read_token_indices(raw.get("trainable_token_indices"), file))


def expected_shapes(config: LMConfig, lora: LoRAConfig) -> dict[str, tuple[int, int]]:
    """Each tensor name an adapter ``lora`` on a model of ``config`` holds -> its shape."""
    shapes = {}
    for name, slot in resolve_targets(config, lora.targets).items():
        shapes[PREFIX + name + A] = (lora.r, slot.d_in)
        shapes[PREFIX + name + B] = (slot.end - slot.start, lora.r)
    return shapes


def check_tensors(file: Path, stored: dict[str, tuple[int, ...]], config: LMConfig,
                  lora: LoRAConfig) -> None:
    """The adapter's tensor names and shapes (``stored``, from the header) against the model:
    a tensor of a module the model lacks, one missing, or one of another shape is refused
    naming it and what this model has."""
    want = expected_shapes(config, lora)
    extra = sorted(set(stored) - set(want))
    if extra:
        module = re.sub(r"\.lora_[AB]\.weight$", "", extra[0].removeprefix(PREFIX))
        layers = f"{config.n_layers} layers, "
        theirs = "the model has no such linear" if module not in linear_names(config) \
            else "target_modules does not name it"
        raise UsageError(f"{file}: tensor {extra[0]!r} is for {module!r}: {theirs} ({layers}"
                         f"{layout(config)}'s names: {', '.join(short_names(config))}): an "
                         "adapter of another base?")
    missing = sorted(set(want) - set(stored))
    if missing:
        raise UsageError(f"{file}: tensor {missing[0]!r} is missing (target_modules names its "
                         f"module; an adapter of another base, with fewer layers?)")
    for name, shape in stored.items():
        if tuple(shape) != want[name]:
            raise UsageError(f"{file}: tensor {name!r} has shape {tuple(shape)}, but r="
                             f"{lora.r} on this model's linear needs {want[name]}: an adapter "
                             "of another base (other widths)?")


def load_adapter(adapter: Adapter | str | Path, model: DecoderOnlyLM) -> LoRAConfig:
    """Wrap ``model``'s targeted linears (``nn.lm.lora.add_lora``) holding the adapter's A and
    B, checked first (``check_tensors``; each finite floating point); the model's base frozen.
    Returns the adapter's config (targets resolved to full names where a pattern gave them)."""
    if not isinstance(adapter, Adapter):
        adapter = read_adapter(adapter)
    try:
        lora = adapter.for_model(model.config)
        shapes = expected_shapes(model.config, lora)
    except UsageError as err:
        raise UsageError(f"{adapter.directory / ADAPTER_CONFIG}: target_modules: "
                         f"{str(err).removeprefix('targets: ')}: an adapter of another base?"
                         ) from None
    file = adapter.directory / ADAPTER_WEIGHTS
    tokens = token_shapes(model.config, adapter.tokens, PREFIX, adapter.directory / ADAPTER_CONFIG)
    limit = sum(a * b for a, b in (shapes | tokens).values()) * 8
    stored = open_stored(file, limit + HEADER_BYTES)
    header = {k: v[1] for k, v in stored.header.items()}
    for name, shape in tokens.items():
        if tuple(header.pop(name, shape)) != shape:
            raise UsageError(f"{file}: tensor {name!r} has shape {tuple(stored.header[name][1])}"
                             f", but its trainable tokens on this model need {shape}")
    stray = [n for n in header if n.endswith(DELTA)]
    if stray:
        raise UsageError(f"{file}: tensor {stray[0]!r} holds trainable tokens of a layer "
                         "trainable_token_indices does not name")
    check_tensors(file, header, model.config, lora)
    add_lora(model, lora)
    load_token_rows(model, adapter.tokens, {n: check_tensor(file, n, stored[n])
                                            for n in tokens if n in stored.header}, PREFIX)
    dtype = model.embed.lut.weight.dtype
    with torch.no_grad():
        for name, (layer, part) in adapted(model).items():
            for suffix, table in ((A, layer.lora_A), (B, layer.lora_B)):
                value = check_tensor(file, PREFIX + name + suffix, stored[PREFIX + name + suffix])
                table[part].copy_(value.to(dtype))
    return lora


def merge_adapter(adapter: str | Path, model: DecoderOnlyLM | None) -> DecoderOnlyLM:
    """``model`` (in place, eval mode, no gradients) with the adapter in the directory
    ``adapter`` loaded (``load_adapter``) and merged (``nn.lm.lora.merge_lora``): the tuned
    model at the base's cost, plain linears again. A model that is no LM (None) is refused."""
    if not isinstance(model, DecoderOnlyLM):
        raise UsageError(f"--adapter {adapter}: a LoRA adapter adapts a language model, and "
                         "--checkpoint is not one")
    read = read_adapter(find_adapter(adapter))
    ids = token_ids(read.tokens)
    if ids and max(ids) >= model.config.vocab_size:  # its tokens grew the vocabulary
        model = with_new_tokens(model, max(ids) + 1 - model.config.vocab_size)
    load_adapter(read, model)
    merge_lora(model).eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return model


def with_adapter(loaded, adapter: str | Path):
    """An opened checkpoint ``loaded`` (an LM's, in place) with ``adapter`` merged in
    (``merge_adapter``; its vocabulary grown by the tokens it added, with the tokenizer saved
    beside it) and named in its meta."""
    lm = loaded.model if isinstance(loaded, LMCheckpoint) else None
    loaded.model = merge_adapter(adapter, lm)
    loaded.tokenizer = adapter_tokenizer(adapter) or loaded.tokenizer
    loaded.meta |= {"adapter": str(adapter)}
    return loaded


def find_adapter(adapter: str | Path, flag: str = "--adapter") -> Path:
    """``adapter`` if it is an adapter directory; else refused naming what it is."""
    adapter = Path(adapter)
    if is_adapter(adapter):
        return adapter
    kind = describe(adapter)
    what = {"is a directory": f"holds no {ADAPTER_CONFIG}", None: "is a file"}.get(kind, kind)
    raise UsageError(f"{flag} {adapter} {what}: not a LoRA adapter directory "
                     f"({ADAPTER_CONFIG}, {ADAPTER_WEIGHTS}: lm tune's or PEFT's)")


def adapter_base(path: str | Path) -> Path:
    """The base model of the adapter in ``path``: its base_model_name_or_path, where that is
    a local model other than an adapter; else refused, saying to name the base."""
    base = read_adapter(path).base
    usage = f"give the base as --checkpoint BASE and this as --adapter {path}"
    if base is None or not Path(base).exists():
        raise UsageError(f"--checkpoint {path} is a LoRA adapter whose base "
                         f"({base!r}) is not a local model: {usage}")
    if is_adapter(base):
        raise UsageError(f"--checkpoint {path} is a LoRA adapter whose base {base} is an "
                         f"adapter too: {usage}")
    return Path(base)
