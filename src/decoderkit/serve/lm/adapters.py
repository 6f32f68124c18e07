"""LoRA adapters served beside the base (``serve --adapter NAME=DIR``, vLLM's
``--lora-modules``): the names a request's ``model`` may give, the engines that take them,
and the adapters put on the base (``interop.lm.adapters.load_adapters``: each checked against
it before the server takes a request).

Several adapters need the rows' routing (``nn.lora.routed``) in PyTorch's float32 or bfloat16
forward: the int8 copy's fbgemm linears, a compiled step (its graph is traced without a route)
and CTranslate2 (its conversion holds the base alone) are refused in one line.
"""

from __future__ import annotations

import re
from pathlib import Path

from torch import nn

from decoderkit.base.errors import UsageError
from decoderkit.interop.lm.adapters import load_adapters
from decoderkit.nn.lora import MultiLoRALinear

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")  # an adapter's id: vLLM's names
# ("sql-lora", "tuned_v2") fit; no '=', '/' or spaces


def split_adapter(text: str) -> tuple[str | None, str]:
    """``--adapter``'s value: (NAME, DIR) for NAME=DIR (NAME as ``NAME`` allows), else (None,
    the whole text: a directory to merge into the base)."""
    name, sep, directory = text.partition("=")
    if sep and NAME.fullmatch(name):
        if not directory:
            raise UsageError(f"--adapter {text}: NAME=DIR needs the directory after '='")
        return name, directory
    return None, text


def check_adapters(named: dict[str, str | Path], base: str) -> None:
    """Adapter ids: each as ``NAME`` allows and none the base's own id."""
    for name in named:
        if not isinstance(name, str) or not NAME.fullmatch(name):
            raise UsageError(f"--adapter NAME=DIR: NAME must be 1-128 letters, digits, '.', "
                             f"'_', ':' or '-' (a letter or digit first), got {name!r}")
        if name == base:
            raise UsageError(f"--adapter {name}={named[name]}: {name!r} is the base model's "
                             "id; give the adapter another name")


def check_adapter_engine(int8: bool = False, compile: bool = False,
                         ctranslate2: bool = False) -> None:
    """Adapters beside the base run in PyTorch's forward, not compiled (see the docstring)."""
    flag = "--int8" if int8 else "--compile" if compile else \
        "--engine ctranslate2" if ctranslate2 else None
    if flag is not None:
        raise UsageError(f"--adapter NAME=DIR with {flag}: adapters beside the base are "
                         "served by decoderkit's float32 (or --dtype bfloat16) engine, not "
                         f"{flag}; serve one adapter merged with --adapter DIR")


def put_adapters(model: nn.Module, base: str, named: dict[str, str | Path], int8: bool = False,
                 compile: bool = False) -> dict[str, int]:
    """The adapters ``named`` (id -> directory) on ``model`` (in place), each checked first;
    returns each one's parameter count."""
    check_adapters(named, base)
    check_adapter_engine(int8, compile)
    load_adapters(model, named)
    counts = dict.fromkeys(named, 0)
    for m in model.modules():
        if isinstance(m, MultiLoRALinear):
            for name, size in zip(m.names, m.sizes, strict=True):
                counts[name] += size
    return counts
