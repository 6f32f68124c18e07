"""nanoGPT checkpoints (``ckpt.pt`` of karpathy/nanoGPT's train.py) as ``DecoderOnlyLM``s.

nanoGPT's GPT is our ``nanogpt`` preset: pre-norm with ``ln_f``, learned positions, exact-erf
GELU, FFN width 4 d, LayerNorm eps 1e-5, linears and LayerNorms with or without bias
(``bias``), head tied to ``wte`` without bias. Its ``ckpt.pt`` is a dict: ``model_args``
(n_layer, n_head, n_embd, block_size, bias, vocab_size, dropout) and ``model`` (the state dict,
GPT-2's names in ``nn.Linear`` layout: no transpose; ``_orig_mod.`` before every name when
trained under ``torch.compile``), beside the optimiser state and training settings. It is read
with ``torch.load(weights_only=True)``: tensors and plain containers only, never code.

Its character-level ``meta.pkl`` (``{"vocab_size", "itos", "stoi"}``) is a pickle: read here
by an unpickler that resolves no global at all (so builds no object and calls nothing), and
only dicts, lists, str and int are accepted in what it holds. It is looked for beside
``ckpt.pt`` (nanoGPT keeps it in ``data/<dataset>/``: copy it there); without one, or for
nanoGPT's GPT-2 BPE data (tiktoken, no meta.pkl), there is no tokenizer.
"""

from __future__ import annotations

import dataclasses
import io
import os
import pickle
from pathlib import Path

import torch

from decoderkit.base.checks import FRACTION, MODEL_SIZES
from decoderkit.base.errors import UsageError
from decoderkit.base.files import check_input_file
from decoderkit.interop.fields import read_field
from decoderkit.interop.gpt.hf import GPT2, build_lm, weight_names
from decoderkit.nn.lm.model import DecoderOnlyLM, LMConfig
from decoderkit.nn.lm.presets import lm_preset
from decoderkit.text.lm.tokenizer import LMTokenizer

CKPT, META = "ckpt.pt", "meta.pkl"
COMPILED = "_orig_mod."  # what torch.compile puts before every parameter name
MODEL_ARGS = ("n_layer", "n_head", "n_embd", "block_size", "bias", "vocab_size")  # required
META_MAX_BYTES = 1 << 24  # a character vocabulary is a few kB; refuse reading anything huge


def checkpoint_file(path: str | Path) -> Path:
    """``path`` itself if a file, else ``path/ckpt.pt`` (nanoGPT's ``out_dir``)."""
    path = Path(path)
    return path / CKPT if path.is_dir() else path


def is_nanogpt_checkpoint(path: str | Path) -> bool:
    """True if ``path`` is (or is a directory holding) a ``ckpt.pt``."""
    file = checkpoint_file(path)
    return file.name == CKPT and file.is_file()


def read_model_args(file: Path, args) -> LMConfig:
    """The ``nanogpt`` preset with nanoGPT's ``model_args``, each read with its type and bounds
    (``interop.fields.read_field``: ``bias`` a bool, never null); a missing or bad one is
    named."""
    if not isinstance(args, dict):
        raise UsageError(f"{file}: 'model_args' must be a dict, got {type(args).__name__}")
    missing = [k for k in MODEL_ARGS if k not in args]
    if missing:
        raise UsageError(f"{file}: model_args lacks {missing} (not a nanoGPT checkpoint?)")
    where = f"{file}: model_args"

    def get(key, want, **kw):
        return read_field(args, key, want, where, **kw)

    d = get("n_embd", MODEL_SIZES["d_model"])
    fields = dict(vocab_size=get("vocab_size", MODEL_SIZES["vocab_size"]),
                  n_layers=get("n_layer", MODEL_SIZES["n_layers"]), d_model=d,
                  n_heads=get("n_head", MODEL_SIZES["n_heads"]), d_ff=4 * d,
                  max_len=get("block_size", MODEL_SIZES["max_len"]),
                  dropout=get("dropout", FRACTION, default=0.0), bias=get("bias", bool))
    try:
        return dataclasses.replace(lm_preset("nanogpt"), **fields)
    except UsageError as err:
        raise UsageError(f"{where}: {err}") from None


def load_nanogpt(path: str | Path) -> tuple[DecoderOnlyLM, LMTokenizer | None]:
    """(model in eval mode, tokenizer from ``meta.pkl`` beside it, or None) of a nanoGPT
    ``ckpt.pt`` (or of the directory holding one)."""
    file = checkpoint_file(path)
    if not file.exists():
        raise UsageError(f"{file}: no such file (a nanoGPT checkpoint is its out_dir/{CKPT})")
    check_input_file(file, "the nanoGPT checkpoint")  # a regular file: no pipe, no device
    try:
        ckpt = torch.load(file, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        raise UsageError(f"{file}: holds more than tensors and plain containers; refusing to "
                         f"unpickle it ({str(err).splitlines()[0]})") from None
    except Exception as err:  # torch.load raises many kinds on a damaged or foreign file
        raise UsageError(f"{file}: not a readable PyTorch checkpoint ({err})") from None
    if not isinstance(ckpt, dict) or "model" not in ckpt or "model_args" not in ckpt:
        raise UsageError(f"{file}: not a nanoGPT checkpoint (needs the keys 'model' and "
                         f"'model_args')")
    config = read_model_args(file, ckpt["model_args"])
    state = ckpt["model"]
    if not isinstance(state, dict):
        raise UsageError(f"{file}: 'model' must be a state dict of tensors")
    hf = weight_names(config, GPT2)  # GPT-2's names in nn.Linear layout: none transposed
    names = dataclasses.replace(hf, strip=(COMPILED, *hf.strip), params={
        ours: dataclasses.replace(src, transposed=False) for ours, src in hf.params.items()})
    model = build_lm(config, names, file, "model_args", state)
    meta = file.parent / META
    return model, read_meta(meta, config.vocab_size) if os.path.lexists(meta) else None


class _NoGlobals(pickle.Unpickler):
    """An unpickler that refuses every global: no class, function or object is ever built."""

    def find_class(self, module: str, name: str):
        raise UsageError(f"refusing to unpickle {module}.{name}: a vocabulary holds only "
                         f"dicts, lists, str and int")

    def persistent_load(self, pid):
        raise UsageError("refusing to unpickle a persistent reference")


def _plain(value, where: str = "meta") -> None:
    """UsageError unless ``value`` is dicts/lists of str and int (bools excluded)."""
    if isinstance(value, dict):
        for k, v in value.items():
            _plain(k, f"{where} key")
            _plain(v, f"{where}[{k!r}]")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _plain(v, f"{where}[{i}]")
    elif isinstance(value, bool) or not isinstance(value, (str, int)):
        raise UsageError(f"{where} is a {type(value).__name__}; a vocabulary holds only dicts, "
                         f"lists, str and int")


def read_meta(file: Path, model_vocab: int) -> LMTokenizer:
    """nanoGPT's character vocabulary (``itos``: id -> character, ids 0..n-1) from
    ``meta.pkl``, read without unpickling any object (see the module docstring); its size must
    be the model's ``model_vocab``: a smaller one is found here, not in the first sample."""
    data = check_input_file(file, "nanoGPT's", META_MAX_BYTES).read_bytes()  # no pipe, small
    try:
        meta = _NoGlobals(io.BytesIO(data)).load()
        _plain(meta)
    except UsageError as err:
        raise UsageError(f"{file}: {err}") from None
    except RecursionError:
        raise UsageError(f"{file}: nested too deeply for a vocabulary (a damaged or hostile "
                         "pickle)") from None
    except Exception as err:  # a damaged pickle raises many kinds
        raise UsageError(f"{file}: not a readable pickle ({err})") from None
    itos = meta.get("itos") if isinstance(meta, dict) else None
    if not isinstance(itos, dict) or not all(type(k) is int for k in itos) \
            or sorted(itos) != list(range(len(itos))):
        raise UsageError(f"{file}: 'itos' must map the ids 0..n-1 to characters")
    try:
        tokenizer = LMTokenizer.from_chars([itos[i] for i in range(len(itos))])
    except UsageError as err:
        raise UsageError(f"{file}: {err}") from None
    if len(itos) != model_vocab:  # nanoGPT sizes a character model by its meta.pkl exactly
        raise UsageError(f"{file} has {len(itos)} characters but the checkpoint's vocab_size is "
                         f"{model_vocab}: " + (f"ids {len(itos)}..{model_vocab - 1} would have "
                         "no character" if len(itos) < model_vocab else "more than the model "
                         "has") + f" (the {META} of another dataset?)")
    return tokenizer
