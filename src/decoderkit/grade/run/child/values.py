"""What crosses the child's boundary: the arguments a plan names, built from the inputs
(``argument``, ``constructor_argument``); the learner's values as plain data the grader loads
with ``weights_only=True`` (``plain``); a module's seeded weights (``perturb``) and layout
(``describe``); the learner's names (``lookup``, ``defines``).
"""

from __future__ import annotations

import math


def plain(value, torch, depth=0):
    """The learner's value as plain data the grader can load safely."""
    if depth > 4:
        return {"__type__": "nested too deep"}
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().as_subclass(torch.Tensor).clone()
    if type(value).__module__ == "numpy" and hasattr(value, "dtype"):
        import numpy as np
        return torch.from_numpy(np.array(value, copy=True))
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, (int, float)):
        return float(value) if isinstance(value, float) else int(value)
    if isinstance(value, (list, tuple)) and len(value) <= 10000:
        return [plain(v, torch, depth + 1) for v in value]
    if isinstance(value, dict) and len(value) <= 10000 and all(isinstance(k, str) for k in value):
        return {"__dict__": {k: plain(v, torch, depth + 1) for k, v in value.items()}}
    return {"__type__": type(value).__name__}


def perturb(module, seed, torch):
    """Seeded, non-trivial values for every parameter (ones/zeros would hide mistakes)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            noise = torch.randn(p.shape, generator=g, dtype=torch.float64).to(p.dtype)
            if p.dim() == 1 and name.rsplit(".", 1)[-1] in ("weight", "a_2", "gamma", "scale"):
                p.copy_(1.0 + 0.3 * noise)
            elif p.dim() == 1:
                p.copy_(0.3 * noise)
            else:
                p.copy_(noise / math.sqrt(p.shape[-1]))


def describe(module):
    """(name, class, a few attributes) for each submodule: the grader reads the layout."""
    rows = []
    for name, m in module.named_modules():
        attrs = {k: getattr(m, k) for k in ("eps", "num_heads", "batch_first", "h", "d_k",
                                            "approximate")
                 if isinstance(getattr(m, k, None), (int, float, bool, str))}
        rows.append([name, type(m).__name__, attrs])
    return rows


def _sublayer(torch, weight):
    """A fixed sublayer function for SublayerConnection: h -> tanh(h W)."""
    return lambda h: torch.tanh(h @ weight.to(h.dtype))


def argument(spec, inputs, torch):
    """A call's argument: an input tensor {"t": key} (with "grad": a leaf that wants a
    gradient, as a model's Parameter), a state dict {"tdict": {name: key}}, the fixed sublayer
    {"sublayer": key}, or a literal {"v": value}."""
    if "t" in spec:
        return inputs[spec["t"]].clone().requires_grad_(bool(spec.get("grad")))
    if "tdict" in spec:  # a state dict: name -> input key
        return {name: inputs[key].clone() for name, key in spec["tdict"].items()}
    if "sublayer" in spec:
        return _sublayer(torch, inputs[spec["sublayer"]])
    return spec["v"]


def lookup(space, name):
    """A planned name in the learner's namespace: 'GPT' or a method, 'GPT.generate'."""
    value = space[name.split(".")[0]]
    for part in name.split(".")[1:]:
        value = getattr(value, part)
    return value


def constructor_argument(spec, space):
    """A constructor argument: a literal, or the learner's config class built from fields
    ({"config": "GPTConfig", "fields": {...}}, nanoGPT's layout)."""
    if isinstance(spec, dict) and "config" in spec:
        return lookup(space, spec["config"])(**spec["fields"])
    return spec


def defines(space, name) -> bool:
    """True when the learner's namespace has ``name`` (a method: its class has it)."""
    try:
        lookup(space, name)
    except (KeyError, AttributeError):
        return False
    return True
