"""Tensors into a model: the one set of rules every weights file passes, whatever wrote it.

Our checkpoints (``training``) and every foreign format (``interop``: Hugging Face Marian,
GPT-2 and OpenAI GPT, nanoGPT, Marian's ``.npz``) load through ``load_file``: first the
config's claim is checked against the file (``check_claim``: the parameters it describes must
fit in what the file holds, read from its header or bounded by its size, before anything is
built), then a file's tensors (``read_tensors``: safetensors, one file or a sharded index
(``nn.stored``, read a tensor at a time from the memory-mapped files), a ``weights_only``
PyTorch pickle, a NumPy ``.npz``) are mapped to the model's state-dict names by a ``NameMap``,
each one used a tensor of a weight dtype (float8: refused), finite, of the shape the model of
the config expects (``nn.tensor_checks``); none missing, none left over. The model is built
unfilled (``nn.skeleton``: on the meta device, then given empty storage) and each tensor is
copied into it once checked (cast to its dtype: bf16 and f16 load as float32); a stored one
(``nn.stored``: safetensors, GGUF) a block of rows at a time, straight into its place:
loading holds the model and one block. Every refusal is one ``UsageError``: ``FILE: tensor
'NAME' ...``, NAME as the file spells it.
"""

from __future__ import annotations

import zipfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import nn

from decoderkit.base.errors import UsageError
from decoderkit.base.files import check_input_file
from decoderkit.nn.skeleton import skeleton
from decoderkit.nn.stored import StoredTensors, first_line, is_index, open_stored
from decoderkit.nn.tensor_checks import check_shape, check_tensor, copy_blocks

HEADER_BYTES = 64 << 20  # room beside the tensors in a weights (or trainer-state) file
PICKLES = (".bin", ".pt", ".pth")  # suffixes read with torch.load(weights_only=True)
HINT = "(another layer count or norm placement?)"  # why names differ from the config's model
CLAIM_SLACK = 2  # a config may describe at most this many times the numbers its file holds:
# a near miss (a layer more) is then named tensor by tensor, a gross one before any allocation


@dataclass(frozen=True)
class Source:
    """Where one of our parameters comes from in a file."""

    names: tuple[str, ...]  # the file's tensors, rows concatenated (HF's q, k, v: our in_proj)
    transposed: bool = False  # stored (in, out), HF's Conv1D, ours nn.Linear's (out, in)
    default: float | None = None  # absent: filled with this (Marian's final_logits_bias)
    leading_one: bool = False  # stored with a leading dimension of 1 ((1, V) for our (V,);
    # each of several parts so: Marian's (1, d) q, k, v biases for our in_proj's (3d,))
    rows: tuple[int, ...] = ()  # each part's rows where unequal (GQA's q, k, v); (): equal


@dataclass(frozen=True)
class NameMap:
    """A format's names: how the model's state dict is made from a file's tensors."""

    params: dict[str, Source]  # our name -> its source; names the model lacks are skipped
    strip: tuple[str, ...] = ()  # prefixes removed from the file's names, in this order
    aliases: dict[str, tuple[str, ...]] = field(default_factory=dict)  # other names it may have
    ignored: frozenset[str] = frozenset()  # file names that are not weights (tied copies)
    ignored_suffixes: tuple[str, ...] = ()  # buffers older files stored (HF's causal mask)
    computed: tuple[str, ...] = ()  # suffixes of our buffers built from the config (sinusoids)


def weights_limit(model: nn.Module) -> int:
    """The most bytes a weights file for ``model`` may hold: float64 values and a header."""
    return sum(v.numel() for v in model.state_dict().values()) * 8 + HEADER_BYTES


def read_tensors(file: Path, max_bytes: int | None) -> Mapping[str, object]:
    """name -> value of a weights file, by its suffix: ``.npz`` NumPy (no pickles),
    ``.bin``/``.pt``/``.pth`` ``torch.load(weights_only=True)`` (no code unpickled), else
    safetensors (``nn.stored.open_stored``: a file, or a ``.index.json`` naming its shards;
    each tensor read when it is looked up). ``file`` must be a regular file of at most
    ``max_bytes`` (a pipe would block); an unreadable one is a ``UsageError`` naming it.
    Values are checked where used."""
    if _is_safetensors(file):
        return open_stored(file, max_bytes)
    check_input_file(file, "the weights file", max_bytes)
    try:
        if file.suffix == ".npz":
            with np.load(file, allow_pickle=False) as arrays:
                return {k: _from_numpy(arrays[k]) for k in arrays.files}
        if file.suffix in PICKLES:
            state = torch.load(file, map_location="cpu", weights_only=True)
            if not isinstance(state, dict):
                raise UsageError(f"{file}: not a state dict but a {type(state).__name__}")
            return state
    except UsageError:
        raise
    except Exception as err:  # each reader raises many kinds on a damaged or foreign file
        raise UsageError(f"{file}: truncated or not a {_kind(file)} file ({first_line(err)})"
                         ) from None


def _is_safetensors(file: Path) -> bool:
    """True if ``file`` is read as safetensors: a sharded index, or any suffix but the others'."""
    return is_index(file) or file.suffix not in (".npz", *PICKLES)


def _kind(file: Path) -> str:
    return {".npz": "NumPy .npz", ".bin": "PyTorch weights", ".pt": "PyTorch weights",
            ".pth": "PyTorch weights"}.get(file.suffix, "safetensors")


def _from_numpy(array: np.ndarray) -> object:
    """A NumPy array as a tensor; one torch has no dtype for (text) stays an array."""
    try:
        return torch.from_numpy(np.ascontiguousarray(array))
    except TypeError:
        return array


def stored_dtype(tensors: Mapping[str, object], names: NameMap) -> torch.dtype:
    """float64 if every floating-point weight of a file (buffers ``names`` ignores aside) is
    float64 (a parity reference), else float32: the dtype that loses nothing of them (and the
    one bfloat16 and float16 weights are computed in). Stored tensors are not read for it."""
    if isinstance(tensors, StoredTensors):
        dtypes = [tensors.dtype(k) for k in tensors]
    else:
        dtypes = [v.dtype if isinstance(v, torch.Tensor) else None for v in tensors.values()]
    floats = [d for k, d in zip(tensors, dtypes, strict=True) if d is not None
              and d.is_floating_point and not k.endswith(names.ignored_suffixes)]
    wide = bool(floats) and all(d == torch.float64 for d in floats)
    return torch.float64 if wide else torch.float32


def identity_map(model: nn.Module) -> NameMap:
    """Our own checkpoints' names: every state-dict name as itself; tied weights (one storage)
    are stored once under any name of their group."""
    groups: dict[tuple[int, int], list[str]] = {}
    for name, tensor in model.state_dict().items():
        key = (tensor.untyped_storage().data_ptr(), tensor.storage_offset())
        groups.setdefault(key, []).append(name)
    params, aliases, copies = {}, {}, set()
    for names in groups.values():
        first, *rest = sorted(names)
        params[first] = Source((first,))
        aliases[first] = tuple(rest)
        copies |= set(rest)
    return NameMap(params, aliases=aliases, ignored=frozenset(copies))


def stored_numbers(file: Path, tensors: Mapping[str, object] | None = None) -> int:
    """The most numbers the weights file ``file`` can hold, its data unread: counted from a
    safetensors header (a sharded index: its shards'), bounded by a ``.npz``'s member sizes or
    a PyTorch pickle's size (one byte a number at least: float8); counted from ``tensors``
    when they are read already."""
    if isinstance(tensors, StoredTensors):
        return tensors.numbers()
    if tensors is not None:
        return sum(v.numel() for v in tensors.values() if isinstance(v, torch.Tensor))
    if _is_safetensors(file):
        return open_stored(file, None).numbers()
    try:
        if file.suffix == ".npz":
            with zipfile.ZipFile(file) as archive:
                return sum(member.file_size for member in archive.infolist())
        return file.stat().st_size
    except Exception as err:  # each reader raises many kinds on a damaged or foreign file
        raise UsageError(f"{file}: truncated or not a {_kind(file)} file ({first_line(err)})"
                         ) from None


def check_claim(file: Path, claimed: int, source: str,
                tensors: Mapping[str, object] | None = None) -> None:
    """The one rule before any model is built: the ``claimed`` numbers of the model ``source``
    describes (``approximate_parameters()`` of its config: the matrices alone) may be at most
    ``CLAIM_SLACK`` times what ``file`` (a regular file) can hold, else a ``UsageError`` naming
    both, so a 100 kB directory whose config claims 40 layers of width 4096 is refused before
    32 GB are allocated."""
    check_input_file(file, "the weights file")
    stored = stored_numbers(file, tensors)
    if claimed > CLAIM_SLACK * stored:
        raise UsageError(f"{file} holds at most {stored:,} numbers, but {source} describes a "
                         f"model of at least {claimed:,} parameters (a damaged or edited "
                         "config, or the weights of another model?)")


def load_file(config, make: Callable[..., nn.Module], file: Path,
              names: NameMap | Callable[[nn.Module], NameMap], source: str, *,
              tensors: Mapping[str, object] | None = None, follow_dtype: bool = False,
              ) -> nn.Module:
    """The whole pipeline of a weights file, which every loader calls: the claim checked first
    (``check_claim`` with ``config.approximate_parameters()``), then ``make(config)`` built
    unfilled (``nn.skeleton``), the tensors read (``read_tensors``, at most ``weights_limit``
    bytes) unless ``tensors`` are given, the model cast to their dtype with ``follow_dtype``
    (``stored_dtype``), and ``load_weights`` with ``names`` (or ``names(model)``)."""
    check_claim(file, config.approximate_parameters(), source, tensors)
    model = skeleton(make, config)  # unfilled: load_weights fills every parameter
    if tensors is None:
        tensors = read_tensors(file, weights_limit(model))
    names = names if isinstance(names, NameMap) else names(model)
    if follow_dtype:
        model.to(stored_dtype(tensors, names))
    return load_weights(model, file, tensors, names, source)


def load_weights(model: nn.Module, file: Path, tensors: Mapping[str, object], names: NameMap,
                 source: str) -> nn.Module:
    """``model`` holding ``tensors`` (read from ``file``) as ``names`` maps them. A missing or
    left-over tensor is refused naming it before any is read (``_plan``); then each is read,
    checked (``check_tensor``, ``check_shape``; ``source`` names where the shapes come from)
    and copied into the model at once (cast to its dtype; the file's tensor then dropped); a
    stored one's rows a block at a time (``copy_blocks``) unless its parts are transposed,
    reshaped or defaulted. Tied parameters are filled through their one storage."""
    expected = model.state_dict()  # the model's own tensors: copying into one fills the model
    for ours, plan in _plan(file, tensors, names, source, expected).items():
        src, parts = names.params[ours], []
        if isinstance(tensors, StoredTensors) and not (src.transposed or src.leading_one) \
                and expected[ours].dim() and all(name is not None for name, _ in plan):
            copy_blocks(file, tensors, plan, expected[ours], source)
            continue
        for name, want in plan:
            if name is None:  # absent: the Source's default
                parts.append(torch.full(want, src.default).reshape(expected[ours].shape))
                continue
            value = check_tensor(file, name, tensors[name])
            check_shape(file, name, tuple(value.shape), want, source)
            parts.append(value.t() if src.transposed else value.reshape(
                (-1, *expected[ours].shape[1:])) if src.leading_one else value)
        value = torch.cat(parts) if len(parts) > 1 else parts[0]
        if value.shape != expected[ours].shape:  # a bug in the format's NameMap
            raise RuntimeError(f"{ours}: {tuple(value.shape)} for {tuple(expected[ours].shape)}")
        with torch.no_grad():
            expected[ours].copy_(value)
        del parts, value  # the file's copy goes before the next tensor is read
    return model


def _plan(file: Path, tensors: Mapping[str, object], names: NameMap, source: str,
          expected: Mapping[str, torch.Tensor]) -> dict[str, list[tuple[str | None, tuple]]]:
    """Our name -> [(the file's name of each part, None: defaulted; its stored shape)], every
    tensor of the file used or ignored, every parameter of the model filled (or computed, or
    tied to one filled); else refused naming the tensor. Nothing is read."""
    stored = {_strip(k, names.strip): k for k in tensors
              if not k.endswith(names.ignored_suffixes)}
    plans, used = {}, set()
    for ours, src in names.params.items():
        if ours not in expected:
            continue
        plans[ours] = []
        for i, part in enumerate(src.names):
            found = next((k for k in (part, *names.aliases.get(part, ())) if k in stored), None)
            want = _part_shape(tuple(expected[ours].shape), len(src.names), src, i)
            if found is None and src.default is None:
                hint = f" (or with {names.strip[-1]!r} before it)" if names.strip else ""
                raise UsageError(f"{file}: tensor {part!r}{hint} of the model {source} describes "
                                 f"is missing {HINT}")
            used.add(found)
            plans[ours].append((None if found is None else stored[found], want))
    extra = sorted(stored[k] for k in set(stored) - used - names.ignored)
    if extra:
        more = f" (and {len(extra) - 1} more)" if len(extra) > 1 else ""
        raise UsageError(f"{file}: tensor {extra[0]!r}{more} does not belong to the model "
                         f"{source} describes {HINT}")
    left = [k for k in expected if k not in plans and not k.endswith(names.computed)
            and not _tied(expected, k, set(plans))]
    if left:
        raise RuntimeError(f"unmapped parameters: {left}")  # a bug in the format's NameMap
    return plans


def _strip(name: str, prefixes: tuple[str, ...]) -> str:
    for prefix in prefixes:
        name = name.removeprefix(prefix)
    return name


def _part_shape(shape: tuple[int, ...], parts: int, src: Source, i: int) -> tuple[int, ...]:
    """The shape the file stores piece i of ``parts`` of a parameter of ``shape`` in."""
    shape = (src.rows[i] if src.rows else shape[0] // parts, *shape[1:])
    if src.leading_one:
        return (1, *shape)
    return shape[::-1] if src.transposed else shape


def _tied(tensors: Mapping[str, torch.Tensor], name: str, filled: set[str]) -> bool:
    """True if ``name`` shares its storage with one of the tensors ``filled``."""
    mine = (tensors[name].untyped_storage().data_ptr(), tensors[name].storage_offset())
    return any((tensors[k].untyped_storage().data_ptr(), tensors[k].storage_offset()) == mine
               for k in filled)
