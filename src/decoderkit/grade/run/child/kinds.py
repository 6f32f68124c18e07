"""The kinds of planned call, one function each, in one table (``KINDS``): a plan names its
kind, ``run`` looks it up. A new kind is a function here and its entry in the table; the
grader's ``Call.kind`` names the same strings.
"""

from __future__ import annotations

from dataclasses import dataclass

from .scripted import (
    ScriptedCachedLM,
    ScriptedEncoderDecoder,
    ScriptedLM,
    ScriptedTranslator,
)
from .values import argument, constructor_argument, defines, describe, lookup, perturb, plain


@dataclass(frozen=True)
class Where:
    """What every kind runs against: the learner's namespace, the plan's inputs, torch."""

    space: dict
    inputs: dict
    torch: object


def call_function(call: dict, target, args: list, at: Where) -> dict:
    """``target(*args)``; which tensor arguments it modified in place, and (arguments marked
    "grad") which of them the sum of its tensor result sends a gradient to."""
    raw = target(*args)
    value = plain(raw, at.torch)
    specs = call.get("args", [])
    mutated = [spec["t"] for spec, a in zip(specs, args, strict=True)
               if "t" in spec and not at.torch.equal(a, at.inputs[spec["t"]])]
    out = {"value": value, "mutated": mutated}
    wanted = [a for spec, a in zip(specs, args, strict=True) if spec.get("grad")]
    if wanted:
        reached = [False] * len(wanted)
        if isinstance(raw, at.torch.Tensor) and raw.requires_grad:
            grads = at.torch.autograd.grad(raw.sum(), wanted, allow_unused=True)
            reached = [g is not None and bool(g.abs().sum() > 0) for g in grads]
        out["gradients"] = [spec["t"] for spec, hit in zip(
            [s for s in specs if s.get("grad")], reached, strict=True) if hit]
    return out


def build_module(call: dict, target, args: list, at: Where) -> dict:
    """Build ``target(*init)`` under the call's seed (its weights perturbed unless told not
    to), run its forwards in eval mode; its outputs, state dict and layout."""
    torch = at.torch
    undefined = [a["config"] for a in call["init"]
                 if isinstance(a, dict) and "config" in a and not defines(at.space, a["config"])]
    if undefined:  # this build needs a class the file does not define (another build may run)
        return {"error": f"NameError: {undefined[0]} is not defined (building "
                         f"{call['name']} from it)", "undefined": undefined[0]}
    torch.manual_seed(call["seed"])
    module = target(*[constructor_argument(a, at.space) for a in call["init"]])
    if not isinstance(module, torch.nn.Module):
        return {"error": f"{call['name']}(...) is a {type(module).__name__}, not an nn.Module"}
    if call.get("perturb", True):
        perturb(module, call["seed"], torch)
    module.eval()
    outs = []
    with torch.no_grad():
        for method, margs in call["forwards"]:
            fn = module if method == "forward" else getattr(module, method)
            outs.append(plain(fn(*[argument(a, at.inputs, torch) for a in margs]), torch))
    attrs = {k: plain(getattr(module, k), torch) for k in call.get("attrs", [])
             if hasattr(module, k)}
    state = {k: v.detach().cpu().as_subclass(torch.Tensor).clone()
             for k, v in module.state_dict().items()}
    return {"value": outs, "state": state, "layout": describe(module),
            "parameters": [n for n, _ in module.named_parameters()], "attrs": attrs}


def generate(call: dict, target, args: list, at: Where) -> dict:
    """A sampling loop on the scripted LM after ``torch.manual_seed`` (args: idx,
    max_new_tokens, temperature, top_k); a method gets nanoGPT's (logits, loss) forward."""
    model = ScriptedLM(at.torch, call["vocab"], call["block"], "." in call["name"])
    at.torch.manual_seed(call["seed"])
    return {"value": plain(target(model, *args), at.torch)}


def generate_cached(call: dict, target, args: list, at: Where) -> dict:
    """A KV-cached greedy loop on the scripted cached LM (args: idx, max_new_tokens)."""
    return {"value": plain(target(ScriptedCachedLM(at.torch, call["vocab"]), *args), at.torch)}


def _decode(model, target, args: list, at: Where) -> dict:
    value = plain(target(model, *args), at.torch)
    return {"value": value, "seen": model.seen, "masks": getattr(model, "masks", [])}


def decode_step(call: dict, target, args: list, at: Where) -> dict:
    """A decode loop on a scripted ``encode`` / ``decode_step`` translator; the prefixes fed."""
    return _decode(ScriptedTranslator(at.torch, call["vocab"], call["eos_at"]), target, args, at)


def decode_annotated(call: dict, target, args: list, at: Where) -> dict:
    """A decode loop on a scripted ``encode`` / ``decode`` / ``generator`` model (the
    Annotated Transformer's interface); the prefixes and target masks fed."""
    model = ScriptedEncoderDecoder(at.torch, call["vocab"], call["eos_at"])
    return _decode(model, target, args, at)


KINDS = {"call": call_function, "module": build_module, "generate": generate,
         "generate_cached": generate_cached, "decode_step": decode_step,
         "decode_annotated": decode_annotated}


def run(call: dict, space: dict, inputs: dict, torch) -> dict:
    """One planned call -> a plain result dict (``{"error": ...}`` for an unknown kind)."""
    kind = KINDS.get(call["kind"])
    if kind is None:
        return {"error": f"unknown call kind {call['kind']!r} (known: {', '.join(KINDS)})"}
    target = lookup(space, call["name"])
    args = [argument(a, inputs, torch) for a in call.get("args", [])]
    return kind(call, target, args, Where(space, inputs, torch))
