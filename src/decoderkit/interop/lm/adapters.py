"""Several PEFT adapters on one base at once, for a server (vLLM's ``--lora-modules``): each
adapter directory read and checked against the base as ``interop.lm.peft.load_adapter``
checks one (a foreign file: bounded; its config's keys, its tensors' names and shapes against
the model's architecture and widths), then every adapter's layers put on the base together
(``nn.lm.lora.add_multi_lora``): rows then pick one (``nn.lora.routed``), nothing is merged.
"""

from __future__ import annotations

from pathlib import Path

from decoderkit.base.errors import UsageError
from decoderkit.interop.lm.peft import find_adapter, load_adapter, read_adapter
from decoderkit.nn.lm.lora import add_multi_lora, take_lora
from decoderkit.nn.lm.model import DecoderOnlyLM
from decoderkit.nn.lora import LoRAConfig


def load_adapters(model: DecoderOnlyLM, named: dict[str, str | Path],
                  flag: str = "--adapter") -> dict[str, LoRAConfig]:
    """Put the adapters ``named`` (name -> directory) on ``model`` (in place; its base
    frozen), each checked first; one that does not fit is refused naming it and the
    difference. Returns each adapter's config."""
    if not isinstance(model, DecoderOnlyLM):
        raise UsageError(f"{flag}: a LoRA adapter adapts a language model, and --checkpoint "
                         "is not one")
    configs, layers = {}, {}
    for name, directory in named.items():
        try:
            read = read_adapter(find_adapter(directory, "the directory"))
            if read.tokens:  # its rows would change the base's embedding for every row
                raise UsageError("it trains new tokens (trainable_token_indices), which "
                                 "change the base for every row: serve it merged, as "
                                 "--adapter DIR alone")
            configs[name] = load_adapter(read, model)
        except UsageError as err:
            raise UsageError(f"{flag} {name}={directory}: {err}") from None
        layers[name] = take_lora(model)
    add_multi_lora(model, layers)
    for p in model.parameters():
        p.requires_grad_(False)
    return configs
