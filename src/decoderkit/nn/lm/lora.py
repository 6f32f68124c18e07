"""LoRA on the decoder-only LM's linears, named as Hugging Face names them (``nn.lora``).

Each of our linears is one or more of the transformers model's modules, by the architecture it
is written as (``linear_names``): a RoPE model is a Llama (``model.layers.N.self_attn.q_proj``,
``k_proj``, ``v_proj``: rows of our ``in_proj``; ``o_proj``: ``out_proj``;
``mlp.gate_proj``, ``up_proj``, ``down_proj``: ``w_1``, ``w_3``, ``w_2``), any other a GPT-2
(``transformer.h.N.attn.c_attn``: all of ``in_proj``; ``attn.c_proj``, ``mlp.c_fc``,
``mlp.c_proj``). Targets are matched as PEFT matches ``target_modules``: a name is the module's
full name or its last parts after a dot (``q_proj``, ``attn.c_proj``); ``all-linear`` is every
linear but the output head. ``add_lora`` freezes the whole model and wraps the targets;
``merge_lora`` folds the adapters in and leaves plain linears. Serving several adapters:
``take_lora`` takes one adapter's layers off again (the base's plain linears back, unmerged),
``add_multi_lora`` puts every adapter's layers on the base together (``MultiLoRALinear``).
New tokens (an end of text the base lacked) are trained as PEFT's ``trainable_token_indices``:
``add_token_rows`` makes those rows of the token embedding (and of an untied head) trained
values (``TokenRows``: the frozen weight with its rows replaced), ``merge_lora`` writes them in.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch.nn.utils import parametrize

from decoderkit.base.errors import UsageError
from decoderkit.nn.lm.model import DecoderOnlyLM, LMConfig
from decoderkit.nn.lora import ALL_LINEAR, LoRAConfig, LoRALinear, MultiLoRALinear, check_rank

LLAMA, GPT2 = "llama", "gpt2"  # the two layouts of Hugging Face names
DEFAULT_TARGETS = {LLAMA: ("q_proj", "v_proj"), GPT2: ("c_attn",)}  # PEFT's, by model type
_LLAMA_FFN = (("gate_proj", "w_1"), ("up_proj", "w_3"), ("down_proj", "w_2"))
_GPT2_LINEARS = (("attn.c_attn", "self_attn.in_proj"), ("attn.c_proj", "self_attn.out_proj"),
                 ("mlp.c_fc", "ffn.w_1"), ("mlp.c_proj", "ffn.w_2"))


@dataclass(frozen=True)
class Slot:
    """Where a Hugging Face linear is in our model: rows [start, end) of one of our linears."""

    module: str  # our linear's name: "blocks.layers.0.self_attn.in_proj"
    start: int  # its first row
    end: int  # one past its last row
    d_in: int  # its input width


def layout(config: LMConfig) -> str:
    """The Hugging Face architecture ``config``'s names follow: Llama for RoPE, else GPT-2."""
    return LLAMA if config.positions == "rope" else GPT2


def linear_names(config: LMConfig) -> dict[str, Slot]:
    """Hugging Face full module name -> its ``Slot``, for every linear but the head, in the
    transformers model's order."""
    c = config
    d, q, kv = c.d_model, c.n_heads * c.d_head, c.kv_heads * c.d_head
    names = {}
    for i in range(c.n_layers):
        ours = f"blocks.layers.{i}"
        if layout(c) == LLAMA:
            theirs = f"model.layers.{i}"
            rows = {"q_proj": (0, q), "k_proj": (q, q + kv), "v_proj": (q + kv, q + 2 * kv)}
            for name, (start, end) in rows.items():
                names[f"{theirs}.self_attn.{name}"] = Slot(f"{ours}.self_attn.in_proj", start,
                                                           end, d)
            names[f"{theirs}.self_attn.o_proj"] = Slot(f"{ours}.self_attn.out_proj", 0, d, q)
            for name, mine in _LLAMA_FFN:
                out = d if mine == "w_2" else c.d_ff
                names[f"{theirs}.mlp.{name}"] = Slot(f"{ours}.ffn.{mine}", 0, out,
                                                     c.d_ff if mine == "w_2" else d)
        else:
            theirs = f"transformer.h.{i}"
            sizes = {"attn.c_attn": (q + 2 * kv, d), "attn.c_proj": (d, q),
                     "mlp.c_fc": (c.d_ff, d), "mlp.c_proj": (d, c.d_ff)}
            for name, mine in _GPT2_LINEARS:
                out, d_in = sizes[name]
                names[f"{theirs}.{name}"] = Slot(f"{ours}.{mine}", 0, out, d_in)
    return names


def short_names(config: LMConfig) -> list[str]:
    """The linears' names as targets give them (``q_proj``, ``c_attn``), each once."""
    return list(dict.fromkeys(n.split(".")[-1] for n in linear_names(config)))


def matches(name: str, target: str) -> bool:
    """PEFT's rule: ``target`` is the module's full name or its ending after a dot."""
    return name == target or name.endswith("." + target)


def resolve_targets(config: LMConfig, targets: tuple[str, ...] | str | None
                    ) -> dict[str, Slot]:
    """The linears ``targets`` names (a tuple of names, ``("all-linear",)``, None: PEFT's
    default for the layout, or a string: a regular expression the full name must match, as
    PEFT reads one); a name that matches none of the model's linears is refused naming them."""
    linears = linear_names(config)
    known = ", ".join(short_names(config))
    if isinstance(targets, str):
        try:
            found = {n: s for n, s in linears.items() if re.fullmatch(targets, n)}
        except re.error as err:
            raise UsageError(f"targets: {targets!r} is not a regular expression ({err})"
                             ) from None
        if not found:
            raise UsageError(f"targets: {targets!r} matches none of this model's linears "
                             f"({known})")
        return found
    if targets is None:
        targets = DEFAULT_TARGETS[layout(config)]
    if tuple(targets) == (ALL_LINEAR,):
        return linears
    for t in targets:
        if not any(matches(n, t) for n in linears):
            raise UsageError(f"targets: this model has no linear {t!r} (its linears: {known}; "
                             f"or {ALL_LINEAR!r})")
    return {n: s for n, s in linears.items() if any(matches(n, t) for t in targets)}


def check_lora(config: LMConfig, lora: LoRAConfig) -> dict[str, Slot]:
    """The linears ``lora`` adapts on a model of ``config``, its targets and rank checked
    there (``resolve_targets``, ``check_rank``): what a command checks before any work."""
    chosen = resolve_targets(config, lora.targets)
    for name, slot in chosen.items():
        check_rank(lora.r, name, slot.d_in, slot.end - slot.start)
    return chosen


def add_lora(model: DecoderOnlyLM, lora: LoRAConfig) -> dict[str, Slot]:
    """Freeze every parameter of ``model`` and wrap each targeted linear in a ``LoRALinear``
    (in place; PEFT's initialisation: the model computes what it did). Returns the adapted
    linears by Hugging Face name. A model adapted already is refused."""
    if adapters(model):
        raise UsageError("this model has LoRA adapters already (merge them first)")
    chosen = check_lora(model.config, lora)
    for p in model.parameters():
        p.requires_grad_(False)
    by_module: dict[str, dict[str, tuple[int, int]]] = {}
    for name, slot in chosen.items():
        by_module.setdefault(slot.module, {})[part_key(name)] = (slot.start, slot.end)
    for module, parts in by_module.items():
        parent, _, attr = module.rpartition(".")
        owner = model.get_submodule(parent)
        setattr(owner, attr, LoRALinear(getattr(owner, attr), parts, lora))
    return chosen


def part_key(name: str) -> str:
    """A Hugging Face linear's key among its ``LoRALinear``'s parts: its last name."""
    return name.rsplit(".", 1)[-1]


def adapters(model: nn.Module) -> dict[str, LoRALinear]:
    """Our module name -> each ``LoRALinear`` of ``model``."""
    return {n: m for n, m in model.named_modules() if isinstance(m, LoRALinear)}


def adapted(model: DecoderOnlyLM) -> dict[str, tuple[LoRALinear, str]]:
    """Hugging Face name -> (its ``LoRALinear``, its part key) of each adapted linear."""
    wrapped = adapters(model)
    out = {}
    for name, slot in linear_names(model.config).items():
        m = wrapped.get(slot.module)
        if m is not None and part_key(name) in m.parts:
            out[name] = (m, part_key(name))
    return out


def merge_lora(model: DecoderOnlyLM) -> DecoderOnlyLM:
    """Fold every adapter into its base (W + s B A) and put the plain linear back, in place:
    the model then has its original parameter names and costs, trainable again."""
    for module, wrapper in adapters(model).items():
        wrapper.merge()
        parent, _, attr = module.rpartition(".")
        setattr(model.get_submodule(parent), attr, wrapper.base)
    if token_rows(model):
        for layer in (model.embed.lut, model.generator.proj):
            if parametrize.is_parametrized(layer, "weight"):
                parametrize.remove_parametrizations(layer, "weight")
        if model.config.tie_head:
            model.generator.proj.weight = model.embed.lut.weight
    for p in model.parameters():
        p.requires_grad_(True)
    return model


def take_lora(model: DecoderOnlyLM) -> dict[str, LoRALinear]:
    """Take every ``LoRALinear`` off ``model`` (in place, unmerged: its base linear back in its
    place) and return them by our module name: an adapter read, its base untouched."""
    taken = adapters(model)
    for module, wrapper in taken.items():
        parent, _, attr = module.rpartition(".")
        setattr(model.get_submodule(parent), attr, wrapper.base)
    return taken


def add_multi_lora(model: DecoderOnlyLM, layers: dict[str, dict[str, LoRALinear]]) -> None:
    """Wrap each linear some adapter adapts in one ``MultiLoRALinear`` holding all of them
    (in place). ``layers``: adapter name -> ``take_lora``'s layers of that adapter on this
    very ``model`` (their bases are its linears)."""
    if adapters(model) or any(isinstance(m, MultiLoRALinear) for m in model.modules()):
        raise UsageError("this model has LoRA adapters already")
    by_module: dict[str, dict[str, LoRALinear]] = {}
    for name, taken in layers.items():
        for module, layer in taken.items():
            if model.get_submodule(module) is not layer.base:
                raise UsageError(f"adapter {name!r}: its {module} is not this model's")
            by_module.setdefault(module, {})[name] = layer
    for module, named in by_module.items():
        parent, _, attr = module.rpartition(".")
        owner = model.get_submodule(parent)
        setattr(owner, attr, MultiLoRALinear(getattr(owner, attr), named))


class TokenRows(nn.Module):
    """A weight (V, d) with rows ``ids`` replaced by trained ``values`` (n, d): PEFT's
    ``TrainableTokensLayer``, as a parametrization of the frozen embedding (and head)."""

    def __init__(self, ids: list[int], values: Tensor):
        super().__init__()
        self.register_buffer("ids", torch.tensor(ids, device=values.device))
        self.values = nn.Parameter(values.detach().clone())

    def forward(self, weight: Tensor) -> Tensor:
        return weight.index_copy(0, self.ids, self.values.to(weight.dtype))


def token_layers(config: LMConfig) -> dict[str, str]:
    """Hugging Face name -> our module, of the layers trainable tokens live in: the token
    embedding, and an untied head (PEFT's ``lm_head`` entry; a tied one follows the embedding)."""
    embed = "model.embed_tokens" if layout(config) == LLAMA else "transformer.wte"
    return {embed: "embed.lut"} | ({} if config.tie_head else {"lm_head": "generator.proj"})


def add_token_rows(model: DecoderOnlyLM, ids: list[int]) -> None:
    """Rows ``ids`` of the token embedding (and of an untied head) trained, the rest of them
    frozen, in place (their values start as the rows' own); a tied head reads the same rows."""
    vocab = model.config.vocab_size
    if not ids or any(not 0 <= i < vocab for i in ids) or len(set(ids)) < len(ids):
        raise UsageError(f"trainable tokens must be distinct ids in [0, {vocab}), got {ids}")
    if token_rows(model):
        raise UsageError("this model has trainable tokens already")
    for module in token_layers(model.config).values():
        layer = model.get_submodule(module)
        rows = TokenRows(ids, layer.weight[ids])
        parametrize.register_parametrization(layer, "weight", rows)
        if model.config.tie_head and module == "embed.lut":
            parametrize.register_parametrization(model.generator.proj, "weight", rows)


def token_rows(model: nn.Module) -> dict[str, TokenRows]:
    """Hugging Face name -> the ``TokenRows`` of each layer holding trainable tokens."""
    if not isinstance(model, DecoderOnlyLM):
        return {}
    out = {}
    for name, module in token_layers(model.config).items():
        layer = model.get_submodule(module)
        if parametrize.is_parametrized(layer, "weight"):
            out[name] = layer.parametrizations.weight[0]
    return out
