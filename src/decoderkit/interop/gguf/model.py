"""A GGUF file's model: its config from the architecture's keys and its tensors through the
weights pipeline (``nn.weights``: the config's claim checked against the header, each tensor
checked, finite and of the config's shape, none missing, none left over).

Architectures (``general.architecture``): ``llama`` (Mistral included: llama.cpp writes it as
llama; transformers reads it as ``mistral``, whose context is its 4,096-position window, only
where ``general.name`` is exactly "mistral", and so does this), ``qwen2``, ``qwen3`` and
``gpt2``; any other is refused naming it. The keys are read into Hugging Face's config names
(as transformers' ``GGUF_CONFIG_MAPPING`` does) after each is checked under its own GGUF name,
and translated by the Hugging Face readers (``interop.llama.hf.llama_config``,
``interop.gpt.hf.gpt_config``), so a GGUF file and a directory of the same model give the same
config and the same refusals. The tensors' names are the Hugging Face ones under ``gguf``'s own
TensorNameMap (as ``interop.gguf.llama`` writes them); llama's q and k rows back in Hugging
Face's order (``to_rotate_half``); the head tied where ``output.weight`` is absent. Llama 3's
RoPE scaling, which llama.cpp's converter writes as ``rope_freqs.weight`` (each pair's
frequency divisor), is read back as the scaling whose divisors those are (``LLAMA3``).
"""

from __future__ import annotations

import numpy as np
import torch

from decoderkit.base.checks import MODEL_SIZES, POSITIVE, count
from decoderkit.base.errors import UsageError
from decoderkit.interop.artifacts import import_extra
from decoderkit.interop.fields import read_field

from decoderkit.interop.gguf.gpt2 import BLOCK
from decoderkit.interop.gguf.llama import INTERLEAVED, to_rotate_half
from decoderkit.interop.gguf.reader import Header
from decoderkit.interop.gguf.tensors import GGUFTensors
from decoderkit.interop.gpt import hf as hf_gpt
from decoderkit.interop.llama import hf as hf_llama
from decoderkit.nn.lm.model import LMConfig
from decoderkit.interop.lm.architectures import ARCHITECTURES
from decoderkit.nn.rope import RopeSpec
from decoderkit.nn.weights import NameMap, Source

ARCHITECTURE = "general.architecture"  # the key naming llama.cpp's architecture
HEAD, EMBEDDING, FREQUENCIES = "output.weight", "token_embd.weight", "rope_freqs.weight"
# Llama 3.1's scaling besides its factor (every Llama 3.1 / 3.2 / 3.3 has these)
LLAMA3 = {"low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 8192}


def architecture_of(header: Header) -> str:
    """``general.architecture``, one decoderkit reads; else refused naming it."""
    arch = read_field(header.fields, ARCHITECTURE, str, header.file)
    if arch not in ARCHITECTURES:
        raise UsageError(f"{header.file}: {ARCHITECTURE} is {arch!r}; decoderkit reads the "
                         f"GGUF architectures {', '.join(ARCHITECTURES)}")
    return arch


def gguf_config(header: Header, vocab: int | None) -> LMConfig:
    """Our config of the model in ``header`` (``vocab``: the tokenizer's size, the rows where
    no ``ARCH.vocab_size`` key says; else the embedding's)."""
    arch = architecture_of(header)
    f, where = header.fields, header.file

    def get(key, want, **kw):
        return read_field(f, f"{arch}.{key}", want, where, **kw)

    rows = header.tensors.get(EMBEDDING)
    vocab = get("vocab_size", MODEL_SIZES["vocab_size"], default=vocab or
                (rows.shape[0] if rows is not None else None), nullable=True)
    raw = {"vocab_size": vocab, "tie_word_embeddings": HEAD not in header.tensors}
    shape = {"context_length": ("max_len", count(1)),  # bounded by the translation
             "embedding_length": ("d_model", MODEL_SIZES["d_model"]),
             "block_count": ("n_layers", MODEL_SIZES["n_layers"]),
             "feed_forward_length": ("d_ff", MODEL_SIZES["d_ff"]),
             "attention.head_count": ("n_heads", MODEL_SIZES["n_heads"])}
    sizes = {ours: get(key, want) for key, (ours, want) in shape.items()}
    if arch == "gpt2":
        raw |= {"model_type": "gpt2", "n_positions": sizes["max_len"], "n_embd":
                sizes["d_model"], "n_layer": sizes["n_layers"], "n_head": sizes["n_heads"],
                "n_inner": sizes["d_ff"], "resid_pdrop": 0.0, "activation_function": "gelu_new",
                "layer_norm_epsilon": get("attention.layer_norm_epsilon", POSITIVE)}
        return hf_gpt.gpt_config(where, raw)[0]
    heads = sizes["n_heads"]
    head_dim = get("attention.key_length", count(1, 1 << 12), default=None, nullable=True)
    value_dim = get("attention.value_length", count(1, 1 << 12), default=head_dim, nullable=True)
    rotary = get("rope.dimension_count", count(1, 1 << 12), default=None, nullable=True)
    width = head_dim or (rotary if arch == "llama" else None) or sizes["d_model"] // heads
    if value_dim not in (None, width) or rotary not in (None, width):
        raise UsageError(f"{where}: {arch}.attention.value_length={value_dim} / "
                         f"{arch}.rope.dimension_count={rotary} differ from the head width "
                         f"{width} (decoderkit rotates whole heads of one width)")
    raw |= {"model_type": _model_type(header, arch), "hidden_size": sizes["d_model"],
            "num_hidden_layers": sizes["n_layers"], "intermediate_size": sizes["d_ff"],
            "num_attention_heads": heads, "max_position_embeddings": sizes["max_len"],
            "num_key_value_heads": get("attention.head_count_kv", MODEL_SIZES["n_heads"],
                                       default=heads),
            "head_dim": width, "rms_norm_eps": get("attention.layer_norm_rms_epsilon", POSITIVE),
            "rope_theta": get("rope.freq_base", POSITIVE, default=10000.0),
            "rope_scaling": _rope_scaling(header, arch, get)}
    return hf_llama.llama_config(where, raw)


def _model_type(header: Header, arch: str) -> str:
    """The Hugging Face model type: the architecture, Mistral as transformers tells it."""
    named = header.fields.get("general.name")
    return hf_llama.MISTRAL if arch == "llama" and named == hf_llama.MISTRAL else arch


def _rope_scaling(header: Header, arch: str, get) -> dict | None:
    """Hugging Face's rope_scaling of the file's RoPE keys (linear: its factor) or of
    ``rope_freqs.weight`` (Llama 3's divisors, matched against ``LLAMA3``'s); others refused."""
    kind = get("rope.scaling.type", str, default="none")
    if kind == "linear":
        return {"rope_type": "linear", "factor": get("rope.scaling.factor", POSITIVE)}
    if kind != "none":
        raise UsageError(f"{header.file}: {arch}.rope.scaling.type is {kind!r}; decoderkit "
                         "reads none, linear and Llama 3's (rope_freqs.weight)")
    if FREQUENCIES not in header.tensors:
        return None
    divisors = GGUFTensors(header)[FREQUENCIES].double()
    factor = float(divisors.max())
    theta = get("rope.freq_base", POSITIVE, default=10000.0)
    spec = RopeSpec(2 * divisors.numel(), theta, "llama3", factor, LLAMA3["low_freq_factor"],
                    LLAMA3["high_freq_factor"], LLAMA3["original_max_position_embeddings"])
    plain = RopeSpec(2 * divisors.numel(), theta)
    found = plain.frequencies().double() / spec.frequencies().double()
    if not torch.allclose(found, divisors, rtol=1e-5):
        raise UsageError(f"{header.file}: {FREQUENCIES} holds RoPE frequency divisors that are "
                         f"not Llama 3's scaling ({LLAMA3} with factor {factor:g})")
    return {"rope_type": "llama3", "factor": factor, **LLAMA3}


def gguf_names(header: Header, config: LMConfig) -> NameMap:
    """Our parameter name -> the GGUF tensor of the file's architecture."""
    arch = architecture_of(header)
    if arch == "gpt2":
        return _gpt2_names(config)
    gguf = import_extra("gguf")
    table = gguf.get_tensor_name_map(gguf.MODEL_ARCH[arch.upper()], config.n_layers)

    def theirs(hf: str) -> str:
        for name in (hf_llama.PREFIX + hf, hf):
            found = table.get_name(name, try_suffixes=(".weight", ".bias"))
            if found is not None:
                return found
        return hf  # no GGUF name: named as missing if the model needs it

    hf = hf_llama.weight_names(config)
    params = {ours: Source(tuple(theirs(n) for n in src.names), rows=src.rows)
              for ours, src in hf.params.items()}
    return NameMap(params, ignored=frozenset({FREQUENCIES}))


def _gpt2_names(config: LMConfig) -> NameMap:
    """llama.cpp's gpt2 tensors (``interop.gguf.gpt2``'s table, read the other way)."""
    names = {"embed.lut.weight": Source((EMBEDDING,)),
             "pos.table.weight": Source(("position_embd.weight",)),
             "generator.proj.weight": Source((HEAD,))}
    for i in range(config.n_layers):
        for mine, theirs in BLOCK.items():
            for p in ("weight", "bias"):
                names[f"blocks.layers.{i}.{mine}.{p}"] = Source((f"blk.{i}.{theirs}.{p}",))
    names |= {f"blocks.norm.{p}": Source((f"output_norm.{p}",)) for p in ("weight", "bias")}
    if config.tie_head:
        del names["generator.proj.weight"]
    return NameMap(names)


def reordered(header: Header, config: LMConfig) -> dict:
    """The tensors whose rows come back in another order: llama's q and k (and their biases)
    from GGUF's interleaved RoPE pairs to Hugging Face's rotate-half."""
    arch = architecture_of(header)
    if arch not in INTERLEAVED:
        return {}
    heads = {"attn_q": config.n_heads, "attn_k": config.kv_heads}
    return {f"blk.{i}.{t}.{p}": (lambda x, h=h: np.ascontiguousarray(to_rotate_half(x, h)))
            for i in range(config.n_layers) for t, h in heads.items() for p in ("weight", "bias")}
