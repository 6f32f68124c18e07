"""Hugging Face Llama-family directories (``model_type`` llama, mistral, qwen2, qwen3) read as
``DecoderOnlyLM``s: a config translation and a name map through the weights pipeline.

The block: RMSNorm before each sublayer and at the end, RoPE (rotate-half) on queries and
keys, a SwiGLU FFN (``gate_proj``, ``up_proj``, ``down_proj``: our ``w_1``, ``w_3``, ``w_2``),
grouped-query attention (``q_proj``, ``k_proj``, ``v_proj``: the rows of our ``in_proj``);
Qwen2 with q/k/v biases, Qwen3 with per-head q/k RMSNorms. RoPE's keys (``rope_parameters``,
``rope_scaling``, ``rope_theta``, ...) are read as transformers 5 reads them
(``interop.llama.rope_keys``). A sliding window (Mistral; Qwen2/3 with ``use_sliding_window``) is
honoured by taking it as the context: within it, windowed attention is full attention, and a
prompt plus its tokens past it is refused like any context overflow. The context is at most
``MODEL_SIZES["max_len"]`` positions (65,536; Llama 3.2's 131,072 is cut to it).

Refused, one line naming the key and what is supported: another ``model_type``, a RoPE
scaling other than default / linear / llama3, partial rotary, an activation other than silu,
biases we cannot place (Llama's ``attention_bias`` without ``mlp_bias``).
"""

from __future__ import annotations

from pathlib import Path

from decoderkit.base.checks import MODEL_SIZES, POSITIVE, count
from decoderkit.base.errors import UsageError
from decoderkit.interop import huggingface
from decoderkit.interop.fields import read_field
from decoderkit.interop.gpt.hf import build_lm
from decoderkit.interop.huggingface import CONFIG, model_type, weights_file
from decoderkit.interop.llama.rope_keys import rope_fields
from decoderkit.interop.lm.architectures import LLAMA, QWEN2, QWEN3
from decoderkit.interop.lm.directory import read_tokenizer
from decoderkit.nn.lm.model import DecoderOnlyLM, LMConfig
from decoderkit.nn.weights import NameMap, Source
from decoderkit.text.lm.tokenizer import LMTokenizer

MISTRAL = "mistral"  # read, never written (those written: interop.lm.architectures)
# each model type's defaults (transformers 5), for keys an older or trimmed config leaves out
_COMMON = {"hidden_act": "silu", "rms_norm_eps": 1e-6, "tie_word_embeddings": False,
           "num_key_value_heads": None, "head_dim": None, "attention_bias": False,
           "mlp_bias": False, "sliding_window": None, "use_sliding_window": False}
DEFAULTS = {LLAMA: _COMMON | {"max_position_embeddings": 2048},
            MISTRAL: _COMMON | {"max_position_embeddings": 131072, "sliding_window": 4096},
            QWEN2: _COMMON | {"max_position_embeddings": 32768},
            QWEN3: _COMMON | {"max_position_embeddings": 32768}}
ACTIVATIONS = {"silu": "swish", "swish": "swish"}  # HF's names of the gate's activation
PREFIX = "model."
BUFFERS = ("rotary_emb.inv_freq",)  # a buffer older files stored: made from the config
RANGES = {"vocab_size": MODEL_SIZES["vocab_size"], "hidden_size": MODEL_SIZES["d_model"],
          "intermediate_size": MODEL_SIZES["d_ff"], "num_hidden_layers": MODEL_SIZES["n_layers"],
          "num_attention_heads": MODEL_SIZES["n_heads"]}


def is_llama_directory(directory: str | Path) -> bool:
    """True if ``directory`` has a config.json whose ``model_type`` is one of ``DEFAULTS``."""
    return model_type(directory) in DEFAULTS


def read_llama_config(directory: str | Path) -> LMConfig:
    """Our config of a Llama-family directory, each key read with its type and bounds; what
    decoderkit cannot express is refused naming the file and the key."""
    return llama_config(*huggingface.read_config(directory, tuple(DEFAULTS), "a Llama-family LM"))


def llama_config(file: object, raw: dict) -> LMConfig:
    """Our config of a Llama-family ``raw`` config (config.json's keys, ``model_type`` one of
    ``DEFAULTS``'), read from ``file`` (named in refusals): a directory's, or a GGUF file's
    keys in Hugging Face's names."""
    kind = raw["model_type"]
    c = DEFAULTS[kind] | raw

    def get(key, want, **kw):
        return read_field(c, key, want, file, **kw)

    activation = get("hidden_act", tuple(ACTIVATIONS))
    sizes = {key: get(key, want) for key, want in RANGES.items()}
    bias = _biases(kind, get("attention_bias", bool), get("mlp_bias", bool), file)
    fields = dict(
        vocab_size=sizes["vocab_size"], n_layers=sizes["num_hidden_layers"],
        d_model=sizes["hidden_size"], n_heads=sizes["num_attention_heads"],
        d_ff=sizes["intermediate_size"], max_len=_context(c, kind, file), dropout=0.0,
        norm_first=True, positions="rope", activation=ACTIVATIONS[activation], bias=bias,
        tie_head=get("tie_word_embeddings", bool), norm="rms",
        norm_eps=get("rms_norm_eps", POSITIVE), ffn="gated",
        n_kv_heads=_unless(get("num_key_value_heads", MODEL_SIZES["n_heads"], nullable=True),
                           sizes["num_attention_heads"]),
        head_dim=_unless(get("head_dim", count(1, 1 << 12), nullable=True),
                         sizes["hidden_size"] / sizes["num_attention_heads"]),
        qkv_bias=True if kind == QWEN2 else None, qk_norm=kind == QWEN3, **rope_fields(c, file))
    try:
        return LMConfig(**fields)
    except UsageError as err:
        raise UsageError(f"{file}: {err}") from None


def _unless(value: int | None, implied: float) -> int | None:
    """``value``, or None where it is what our config implies by default anyway."""
    return None if value == implied else value


def _biases(kind: str, attention: bool, mlp: bool, file: Path) -> bool:
    """Our ``bias`` (every linear) from HF's attention_bias (q, k, v, o) and mlp_bias; Qwen2's
    q/k/v biases are its architecture's (``qkv_bias``)."""
    if attention != mlp:
        raise UsageError(f"{file}: attention_bias={attention} with mlp_bias={mlp} is not "
                         "supported (decoderkit biases every linear or none besides q/k/v)")
    if kind == QWEN2 and attention:
        raise UsageError(f"{file}: attention_bias is not a qwen2 key (its q/k/v biases are "
                         "fixed)")
    return attention


def _context(c: dict, kind: str, file: Path) -> int:
    """max_len: the positions, or the sliding window where one applies (attention within it is
    full attention), at most ``MODEL_SIZES["max_len"]``."""
    positions = read_field(c, "max_position_embeddings", count(1), file)
    windowed = kind == MISTRAL or read_field(c, "use_sliding_window", bool, file)
    window = read_field(c, "sliding_window", count(1), file, nullable=True)
    if windowed and window is not None:
        positions = min(positions, window)
    return min(positions, MODEL_SIZES["max_len"].high)


def weight_names(config: LMConfig) -> NameMap:
    """Our parameter name -> its HF name without ``model.``; q, k, v rows concatenated."""
    c = config
    q, kv = c.n_heads * c.d_head, c.kv_heads * c.d_head
    names = {"embed.lut.weight": Source(("embed_tokens.weight",)),
             "blocks.norm.weight": Source(("norm.weight",))}
    for i in range(c.n_layers):
        ours, theirs = f"blocks.layers.{i}", f"layers.{i}"
        attn = f"{theirs}.self_attn"
        for p in ("weight", "bias"):
            names[f"{ours}.self_attn.in_proj.{p}"] = Source(
                tuple(f"{attn}.{x}_proj.{p}" for x in "qkv"), rows=(q, kv, kv))
            names[f"{ours}.self_attn.out_proj.{p}"] = Source((f"{attn}.o_proj.{p}",))
            for mine, hf in (("w_1", "gate_proj"), ("w_3", "up_proj"), ("w_2", "down_proj")):
                names[f"{ours}.ffn.{mine}.{p}"] = Source((f"{theirs}.mlp.{hf}.{p}",))
        for norm in ("q_norm", "k_norm"):
            names[f"{ours}.self_attn.{norm}.weight"] = Source((f"{attn}.{norm}.weight",))
        names[f"{ours}.res1.norm.weight"] = Source((f"{theirs}.input_layernorm.weight",))
        names[f"{ours}.res2.norm.weight"] = Source((f"{theirs}.post_attention_layernorm.weight",))
    if not c.tie_head:
        names["generator.proj.weight"] = Source(("lm_head.weight",))
    return NameMap(names, strip=(PREFIX,), ignored_suffixes=BUFFERS,
                   ignored=frozenset({"lm_head.weight"} if c.tie_head else ()))


def load_llama(directory: str | Path) -> tuple[DecoderOnlyLM, LMTokenizer | None]:
    """(model in eval mode, tokenizer or None) of a local Llama-family directory: float64 for
    float64 weights, else float32 (bf16 and f16 ones widened); the tokenizer from its
    ``tokenizer.json``, None when there is none."""
    directory = Path(directory)
    config = read_llama_config(directory)
    model = build_lm(config, weight_names(config), weights_file(directory), CONFIG)
    return model, read_tokenizer(directory, config.vocab_size)
