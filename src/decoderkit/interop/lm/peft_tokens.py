"""New tokens in PEFT's adapter format (``trainable_token_indices``, PEFT's trainable tokens):
an adapter that trained the rows of tokens its base lacked (``lm tune``'s end of text) holds
them beside A and B, as PEFT saves them::

    adapter_config.json          "trainable_token_indices": {"embed_tokens": [ids]} (GPT-2:
                                 "wte"; an untied head's "lm_head" too)
    adapter_model.safetensors    base_model.model.<layer>.token_adapter.trainable_tokens_delta
                                 (n, d): the rows' values (they replace the base's rows)

PEFT opens it on a transformers base whose embeddings are resized to the adapter's tokenizer
(saved beside it: ``model.resize_token_embeddings(len(tokenizer))``); here ``merge_adapter``
grows the base itself. The indices are foreign values: ints, bounded, in the layers this model
has (``nn.lm.lora.token_layers``), every layer the same ids.
"""

from __future__ import annotations

from pathlib import Path

import torch

from decoderkit.base.errors import UsageError
from decoderkit.interop.fields import shown
from decoderkit.nn.lm.lora import add_token_rows, token_layers, token_rows
from decoderkit.nn.lm.model import LMConfig, DecoderOnlyLM
from decoderkit.text.lm.tokenizer import LMTokenizer

DELTA = ".token_adapter.trainable_tokens_delta"  # PEFT's tensor of a layer's rows
MAX_TOKENS = 4096  # new tokens an adapter may train at most
MAX_ID = 1 << 24  # the largest id read (a vocabulary past 16M rows is no LM's)
TOKENIZER = "tokenizer.json"  # the tokenizer an adapter that added tokens saves beside it


def token_config(model: DecoderOnlyLM) -> dict[str, list[int]] | None:
    """``trainable_token_indices`` of ``model``'s trainable tokens (None: none)."""
    rows = token_rows(model)
    return {name.rsplit(".", 1)[-1]: r.ids.tolist() for name, r in rows.items()} or None


def token_tensors(model: DecoderOnlyLM, prefix: str) -> dict[str, torch.Tensor]:
    """PEFT's tensors of ``model``'s trainable tokens: each layer's rows (n, d)."""
    return {prefix + name + DELTA: r.values.detach().to("cpu").contiguous().clone()
            for name, r in token_rows(model).items()}


def read_token_indices(value: object, file: Path) -> dict[str, tuple[int, ...]] | None:
    """adapter_config.json's ``trainable_token_indices``: None, a list of ids (the token
    embedding's), or layer name -> ids; each id an int in [0, MAX_ID), at most MAX_TOKENS."""
    if value is None or value == {} or value == []:
        return None
    layers = {"embed_tokens": value} if isinstance(value, list) else value
    if not isinstance(layers, dict) or not all(isinstance(k, str) for k in layers):
        raise UsageError(f"{file}: trainable_token_indices must be a list of token ids or a "
                         f"layer name -> ids object, got {shown(value)}")
    out = {}
    for name, ids in layers.items():
        if not isinstance(ids, list) or not 0 < len(ids) <= MAX_TOKENS or not all(
                isinstance(i, int) and not isinstance(i, bool) and 0 <= i < MAX_ID for i in ids):
            raise UsageError(f"{file}: trainable_token_indices[{name!r}] must be 1 to "
                             f"{MAX_TOKENS} token ids in [0, {MAX_ID}), got {shown(ids)}")
        out[name] = tuple(ids)
    return out


def token_shapes(config: LMConfig, tokens: dict[str, tuple[int, ...]] | None, prefix: str,
                 file: Path) -> dict[str, tuple[int, int]]:
    """Each token tensor's name -> its shape, on a model of ``config``; a layer the model
    does not have, or layers of different ids, refused naming them."""
    if not tokens:
        return {}
    layers = {name.rsplit(".", 1)[-1]: name for name in token_layers(config)}
    if len(set(tokens.values())) > 1:
        raise UsageError(f"{file}: trainable_token_indices gives its layers different ids "
                         f"({shown({k: list(v) for k, v in tokens.items()})}); decoderkit "
                         "trains the same tokens in each")
    shapes = {}
    for name, ids in tokens.items():
        if name not in layers:
            raise UsageError(f"{file}: trainable_token_indices names {name!r}, which this "
                             f"model has no trainable tokens in (its: {', '.join(layers)})")
        shapes[prefix + layers[name] + DELTA] = (len(ids), config.d_model)
    return shapes


def token_ids(tokens: dict[str, tuple[int, ...]] | None) -> list[int]:
    """The adapter's new token ids (every layer's are the same: ``token_shapes``)."""
    return list(next(iter(tokens.values()))) if tokens else []


def load_token_rows(model: DecoderOnlyLM, tokens: dict[str, tuple[int, ...]] | None,
                    tensors: dict[str, torch.Tensor], prefix: str) -> None:
    """The adapter's token rows (``tensors``, checked) onto ``model``; a head left out of
    ``tokens`` keeps its own rows."""
    ids = token_ids(tokens)
    if not ids:
        return
    if max(ids) >= model.config.vocab_size:
        raise UsageError(f"the adapter trains token ids up to {max(ids)}, past this model's "
                         f"vocabulary of {model.config.vocab_size}: open it with "
                         "merge_adapter, which grows the base")
    add_token_rows(model, ids)
    dtype = model.embed.lut.weight.dtype
    with torch.no_grad():
        for name, rows in token_rows(model).items():
            if prefix + name + DELTA in tensors:
                rows.values.copy_(tensors[prefix + name + DELTA].to(dtype))


def adapter_tokenizer(directory: str | Path) -> LMTokenizer | None:
    """The tokenizer saved beside an adapter (its added tokens), None where it has none."""
    file = Path(directory) / TOKENIZER
    return LMTokenizer.load(file) if file.is_file() else None
