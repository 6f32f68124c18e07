"""Hugging Face GPT-2 and OpenAI GPT (GPT-1) directories read as ``DecoderOnlyLM``s, and any
GPT-2-shaped LM written back as a directory ``GPT2LMHeadModel.from_pretrained`` loads.

A directory is ``config.json`` (``model_type`` "gpt2" or "openai-gpt") with
``model.safetensors`` or ``pytorch_model.bin`` (``interop.huggingface``), loaded through the
weights pipeline (``nn.weights``: each tensor a finite float of the config's shape). Tensor
names come with or without the ``transformer.`` prefix (GPT2LMHeadModel / GPT2Model). HF's
``Conv1D`` stores weights as (in, out), the transpose of our ``nn.Linear`` (out, in);
``c_attn``'s columns are q, k, v as our packed ``in_proj`` rows. The attention ``bias`` /
``masked_bias`` buffers (the causal mask) are not weights and are skipped. GPT-2 is pre-norm
with ``ln_f``; GPT-1 post-norm without (``ln_1`` after attention); OpenAIGPT's ``afn="gelu"``
is the tanh form (its own table maps it to ``gelu_new``).

Not carried over (inference is unaffected): separate embedding/attention/residual dropout
rates (ours has one rate: ``resid_pdrop`` is taken). Refused by name: anything else decoderkit
cannot express (another LayerNorm epsilon, unscaled or layer-scaled attention, cross-attention).

Legend: d = n_embd, f = n_inner (4 d by default), V vocabulary size.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from decoderkit.base.checks import FRACTION, MODEL_SIZES, POSITIVE
from decoderkit.base.errors import UsageError
from decoderkit.generation.lm.defaults import NO_DEFAULTS, GenerationDefaults
from decoderkit.interop import huggingface
from decoderkit.interop.fields import read_field
from decoderkit.interop.huggingface import CONFIG, model_type, weights_file
from decoderkit.interop.lm import directory as lm_directory
from decoderkit.interop.lm.export import write_lm_directory
from decoderkit.nn.lm.model import DecoderOnlyLM, LMConfig
from decoderkit.nn.weights import NameMap, Source, load_file
from decoderkit.text.lm.tokenizer import LMTokenizer

GPT2, OPENAI_GPT = "gpt2", "openai-gpt"
VOCAB, MERGES = "vocab.json", "merges.txt"
LAYER_NORM_EPS = 1e-5  # nn.norms.LayerNorm's epsilon, the only one we build
PREFIX = "transformer."
# each model type's defaults (transformers 5): save_pretrained leaves out keys at their default
DEFAULTS = {
    GPT2: {"vocab_size": 50257, "n_positions": 1024, "n_embd": 768, "n_layer": 12,
           "n_head": 12, "n_inner": None, "activation_function": "gelu_new",
           "resid_pdrop": 0.1, "layer_norm_epsilon": 1e-5, "scale_attn_weights": True,
           "scale_attn_by_inverse_layer_idx": False, "reorder_and_upcast_attn": False,
           "add_cross_attention": False,
           "tie_word_embeddings": True},
    OPENAI_GPT: {"vocab_size": 40478, "n_positions": 512, "n_embd": 768, "n_layer": 12,
                 "n_head": 12, "afn": "gelu", "resid_pdrop": 0.1, "layer_norm_epsilon": 1e-5,
                 "tie_word_embeddings": True},
}
# HF activation names -> ours; OpenAIGPT's own table maps "gelu" to the tanh form
ACTIVATION_NAMES = {
    GPT2: {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu",
           "relu": "relu", "silu": "swish", "swish": "swish"},
    OPENAI_GPT: {"gelu": "gelu_tanh", "relu": "relu", "silu": "swish", "swish": "swish"},
}
EXPORT_ACTIVATIONS = {"gelu_tanh": "gelu_new", "gelu": "gelu", "relu": "relu", "swish": "silu"}
FIXED = {"scale_attn_weights": True, "scale_attn_by_inverse_layer_idx": False,
         "reorder_and_upcast_attn": False, "add_cross_attention": False}  # ours, fixed
# the causal mask and position ids: buffers older files stored, not weights
BUFFERS = (".attn.bias", ".attn.masked_bias", "position_ids")


def is_hf_gpt_directory(directory: str | Path) -> bool:
    """True if ``directory`` has a ``config.json`` whose ``model_type`` is gpt2/openai-gpt."""
    return model_type(directory) in DEFAULTS


def read_hf_config(directory: str | Path) -> tuple[LMConfig, str]:
    """(our config, the model type) of an HF GPT directory, each key read with its type and
    bounds (``interop.fields.read_field``); what we cannot express is refused naming the file
    and the key."""
    return gpt_config(*huggingface.read_config(directory, tuple(DEFAULTS), "a decoder-only LM"))


def gpt_config(file: object, raw: dict) -> tuple[LMConfig, str]:
    """(our config, the model type) of a GPT-2 / OpenAI GPT ``raw`` config (config.json's
    keys) read from ``file`` (named in refusals): a directory's, or a GGUF file's keys in
    Hugging Face's names."""
    kind = raw["model_type"]
    c = DEFAULTS[kind] | raw

    def get(key, want, **kw):
        return read_field(c, key, want, file, **kw)

    for key, want in FIXED.items():
        if kind == GPT2 and get(key, bool) != want:
            raise UsageError(f"{file}: {key}={c[key]!r} cannot be expressed by decoderkit "
                             f"(needs {want!r})")
    if get("layer_norm_epsilon", POSITIVE) != LAYER_NORM_EPS:
        raise UsageError(f"{file}: layer_norm_epsilon={c['layer_norm_epsilon']!r} cannot be "
                         f"expressed by decoderkit (its LayerNorm uses {LAYER_NORM_EPS})")
    act_key = "activation_function" if kind == GPT2 else "afn"
    activation = get(act_key, tuple(ACTIVATION_NAMES[kind]))
    d = get("n_embd", MODEL_SIZES["d_model"])
    d_ff = get("n_inner", MODEL_SIZES["d_ff"], nullable=True) if kind == GPT2 else None
    fields = dict(vocab_size=get("vocab_size", MODEL_SIZES["vocab_size"]),
                  n_layers=get("n_layer", MODEL_SIZES["n_layers"]), d_model=d,
                  n_heads=get("n_head", MODEL_SIZES["n_heads"]),
                  d_ff=4 * d if d_ff is None else d_ff,  # null (only null): 4 d
                  max_len=get("n_positions", MODEL_SIZES["max_len"]),
                  dropout=get("resid_pdrop", FRACTION), norm_first=kind == GPT2,
                  positions="learned", activation=ACTIVATION_NAMES[kind][activation],
                  bias=True, tie_head=get("tie_word_embeddings", bool), scale_embeddings=False)
    try:
        config = LMConfig(**fields)
    except UsageError as err:
        raise UsageError(f"{file}: {err}") from None
    return config, kind


def weight_names(config: LMConfig, kind: str) -> NameMap:
    """Our parameter name -> its HF name without ``transformer.`` (Conv1D weights stored
    transposed); the causal-mask buffers, and a tied head's copy, ignored."""
    wte, wpe = ("wte", "wpe") if kind == GPT2 else ("tokens_embed", "positions_embed")
    names = {"embed.lut.weight": Source((f"{wte}.weight",)),
             "pos.table.weight": Source((f"{wpe}.weight",))}
    for i in range(config.n_layers):
        ours, theirs = f"blocks.layers.{i}", f"h.{i}"
        for mine, hf in (("self_attn.in_proj", "attn.c_attn"), ("self_attn.out_proj",
                         "attn.c_proj"), ("ffn.w_1", "mlp.c_fc"), ("ffn.w_2", "mlp.c_proj")):
            names[f"{ours}.{mine}.weight"] = Source((f"{theirs}.{hf}.weight",), transposed=True)
            names[f"{ours}.{mine}.bias"] = Source((f"{theirs}.{hf}.bias",))
        for n in (1, 2):
            for p in ("weight", "bias"):
                names[f"{ours}.res{n}.norm.{p}"] = Source((f"{theirs}.ln_{n}.{p}",))
    if config.norm_first:
        names |= {f"blocks.norm.{p}": Source((f"ln_f.{p}",)) for p in ("weight", "bias")}
    if not config.tie_head:
        names["generator.proj.weight"] = Source(("lm_head.weight",))
    return NameMap(names, strip=(PREFIX,), ignored_suffixes=BUFFERS,
                   ignored=frozenset({"lm_head.weight"} if config.tie_head else ()))


def load_hf_gpt(directory: str | Path) -> tuple[DecoderOnlyLM, LMTokenizer | None]:
    """(model in eval mode, tokenizer or None) of a local HF gpt2 / openai-gpt directory.

    The model is float64 for float64 weights, else float32. The tokenizer: from ``vocab.json``
    + ``merges.txt`` GPT-2's byte-level BPE, or OpenAI GPT's own BPE for openai-gpt; else a
    ``tokenizer.json`` (our export's); None when there is none.
    """
    directory = Path(directory)
    config, kind = read_hf_config(directory)
    file = weights_file(directory)
    model = build_lm(config, weight_names(config, kind), file, CONFIG)
    return model, read_tokenizer(directory, config, kind)


def build_lm(config: LMConfig, names: NameMap, file: Path, source: str,
             tensors: dict[str, object] | None = None) -> DecoderOnlyLM:
    """A ``DecoderOnlyLM`` in eval mode holding the tensors of ``file`` (or ``tensors`` read
    from it) mapped by ``names``, through the weights pipeline (``nn.weights.load_file``;
    ``source`` gives the shapes); float64 if the weights are, else float32."""
    return load_file(config, DecoderOnlyLM, file, names, source, tensors=tensors,
                     follow_dtype=True).eval()


def read_tokenizer(directory: Path, config: LMConfig, kind: str = GPT2) -> LMTokenizer | None:
    """The tokenizer in ``directory``: vocab.json + merges.txt (GPT-2's byte-level BPE, or
    OpenAI GPT's for ``kind`` openai-gpt), else tokenizer.json; with tokenizer_config.json's
    special tokens (``interop.lm.directory.read_tokenizer``); None when there is none (one
    that is there but not a regular file, a pipe say, is refused by its reader)."""
    base = None
    if os.path.lexists(directory / VOCAB) or os.path.lexists(directory / MERGES):
        read = LMTokenizer.openai_gpt if kind == OPENAI_GPT else LMTokenizer.byte_level
        base = read(directory / VOCAB, directory / MERGES)
    return lm_directory.read_tokenizer(directory, config.vocab_size, base, directory / VOCAB)


def check_exportable(config: LMConfig) -> None:
    """Refuse, naming the option, an LM that GPT2LMHeadModel cannot hold exactly."""
    for name, value, want in (("norm_first", config.norm_first, True),
                              ("positions", config.positions, "learned"),
                              ("scale_embeddings", config.scale_embeddings, False)):
        if value != want:
            raise UsageError(f"GPT2LMHeadModel cannot express {name}={value!r} (needs {want!r})")
    if config.activation not in EXPORT_ACTIVATIONS:
        raise UsageError(f"GPT2LMHeadModel cannot express activation={config.activation!r}")


def export_transformers(model: DecoderOnlyLM, tokenizer: LMTokenizer | None, out: str | Path,
                        overwrite: bool = False, generation: GenerationDefaults = NO_DEFAULTS,
                        chat_template: str | None = None) -> Path:
    """Write ``out``: config.json, model.safetensors (Conv1D layout, ``transformer.`` names),
    the whole tokenizer when one is given, generation_config.json (the end ids, and
    ``generation``'s defaults: a Hugging Face directory's own, carried over), the
    ``chat_template`` where there is one and decoderkit's manifest; atomically
    (``interop.lm.export.write_lm_directory``).

    Biases a bias=False model lacks are written as zeros (the same logits). ``overwrite``
    replaces only an earlier export (``interop.artifacts.write_directory``).
    """
    if not isinstance(model, DecoderOnlyLM):
        raise TypeError(f"model must be a DecoderOnlyLM, got {type(model).__name__}")
    tensors = gpt2_tensors(model)
    hf_config = gpt2_config(model, tokenizer) | {"architectures": ["GPT2LMHeadModel"]}
    manifest = {"engine": "transformers", "config": model.config.to_dict()}
    return write_lm_directory(out, overwrite, tensors, hf_config, tokenizer, manifest,
                              context=model.config.max_len, generation=generation,
                              chat_template=chat_template)


def gpt2_tensors(model: DecoderOnlyLM) -> dict[str, torch.Tensor]:
    """GPT2LMHeadModel's tensors of ``model`` (checked exportable): HF names, Conv1D layout,
    zeros for the biases a bias=False model lacks."""
    c = model.config
    check_exportable(c)
    ours = model.state_dict()
    tensors = {}
    for name, src in weight_names(c, GPT2).params.items():
        (theirs,), transposed = src.names, src.transposed
        value = ours.get(name)
        if value is None:  # a bias=False model: HF's Conv1D and LayerNorm always have one
            rows = ours[name.replace(".bias", ".weight")].shape[0]
            value = torch.zeros(rows, dtype=ours["embed.lut.weight"].dtype)
        value = value.detach().to("cpu")
        key = theirs if theirs == "lm_head.weight" else PREFIX + theirs
        tensors[key] = (value.t() if transposed else value).contiguous().clone()
    return tensors


def gpt2_config(model: DecoderOnlyLM, tokenizer: LMTokenizer | None) -> dict:
    """The config.json of ``model`` as a GPT-2 (no ``architectures``: the caller's; the
    special ids: ``interop.lm.export``'s)."""
    c = model.config
    if tokenizer is not None and tokenizer.vocab_size > c.vocab_size:
        raise UsageError(f"the tokenizer has {tokenizer.vocab_size} tokens, more than the "
                         f"model's vocab_size {c.vocab_size}")
    return {
        "model_type": GPT2, "vocab_size": c.vocab_size,
        "n_positions": c.max_len, "n_embd": c.d_model, "n_layer": c.n_layers,
        "n_head": c.n_heads, "n_inner": c.d_ff,
        "activation_function": EXPORT_ACTIVATIONS[c.activation], "resid_pdrop": c.dropout,
        "embd_pdrop": c.dropout, "attn_pdrop": c.dropout, "layer_norm_epsilon": LAYER_NORM_EPS,
        "tie_word_embeddings": c.tie_head,
        "torch_dtype": str(model.embed.lut.weight.dtype).removeprefix("torch."),
    }
