"""The layers' and stacks' arguments before ``nn.layers.BlockSpec`` (0.3), still taken with a
``DeprecationWarning``: ``EncoderLayer(d_model, n_heads, d_ff, ...)``, ``Encoder(d_model,
n_heads, d_ff, n_layers, ...)``, as notebooks written before the spec call them."""

from __future__ import annotations

import warnings

OLD_ARGS = ("n_heads", "d_ff", "dropout", "norm_first", "layer_norm", "activation", "bias",
            "norm_bias")  # a layer's arguments after d_model, in their order
OLD_STACK = (*OLD_ARGS[:2], "n_layers", *OLD_ARGS[2:7], "final_norm", "norm_bias")  # a stack's
NOT_SPEC = ("n_layers", "final_norm")  # a stack's own, not the block's


def old_fields(owner: str, d_model: object, old: tuple, named: dict,
               names: tuple[str, ...]) -> tuple[dict, dict]:
    """(the spec's fields, the stack's own) of ``owner``'s call in the old form: d_model, then
    ``names`` in order or by name; warned. A first argument that is no int, or more arguments
    than ``names``, is a ``TypeError`` naming ``owner`` and what it got."""
    if not isinstance(d_model, int) or isinstance(d_model, bool) or len(old) > len(names):
        raise TypeError(f"{owner} takes a BlockSpec (nn.layers.BlockSpec(d_model, n_heads, "
                        f"d_ff, ...)), got {type(d_model).__name__} {d_model!r}")
    warnings.warn(f"{owner}(d_model, n_heads, d_ff, ...) is deprecated: pass nn.layers."
                  f"BlockSpec(d_model, n_heads, d_ff, ...)", DeprecationWarning, stacklevel=4)
    fields = {"d_model": d_model} | dict(zip(names, old, strict=False)) | named
    rest = {k: fields.pop(k) for k in NOT_SPEC if k in fields}
    return fields, rest
