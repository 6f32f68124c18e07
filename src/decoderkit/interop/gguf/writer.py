"""What every GGUF export shares: the tensor types (float32, float16, q8_0), the byte-level
BPE vocabulary as llama.cpp reads it, and the file written through the ``gguf`` package into an
export directory (``interop.artifacts.write_directory``: a temporary name, renamed; an --out
holding a user's file refused).

llama.cpp names a BPE tokenizer's pre-tokenizer (``tokenizer.ggml.pre``) from a table of known
tokenizers; its own converter finds the name by hashing the tokenizer's output and refuses one it
has not seen (any tokenizer a user trained). Here the name comes from the tokenizer's own rules
(``pretokenizer.pre_tokenizer_name``: gpt-2, llama-bpe, qwen2, smollm).

llama.cpp stops generating at its end-of-generation set: the ids of three keys
(``tokenizer.ggml.eos_token_id``, ``eot_token_id``, ``eom_token_id``) and every token whose text
it knows as an end (``END_TEXTS``, llama-vocab.cpp's list). ``end_slots`` places the ids a model
ends at (the tokenizer's and generation_config.json's list) so that each is in that set.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from decoderkit.base.checks import check_choice
from decoderkit.base.errors import UsageError
from decoderkit.base.files import write_atomic
from decoderkit.base.moved import forward
from decoderkit.interop.artifacts import MANIFEST, import_extra, write_directory
from decoderkit.interop.gguf.pretokenizer import pre_tokenizer_name
from decoderkit.interop.lm.architectures import GGUF_TYPES
from decoderkit.nn.lm.model import LMConfig
from decoderkit.text.lm.tokenizer import LMTokenizer

__getattr__ = forward(__name__)  # its TYPES: interop.lm.architectures.GGUF_TYPES
FILE = "model.gguf"
ENGINE = "gguf"  # the export's manifest engine
Q8_BLOCK = 32  # q8_0 quantises rows in blocks of 32 (one float16 scale each)
NORMAL, CONTROL, USER_DEFINED, UNUSED = 1, 3, 4, 5  # gguf.TokenType's values
# the token texts llama.cpp takes as an end of generation by their text alone (llama-vocab.cpp,
# since September 2024; later versions add more, e.g. <|end_of_text|>, which get a key here)
END_TEXTS = frozenset({"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
                       "<|eom_id|>", "<EOT>"})
END_KEYS = ("eos", "eot", "eom")  # the keys llama.cpp reads an end-of-generation id from


@dataclass(frozen=True)
class Vocabulary:
    """A tokenizer as GGUF's ``tokenizer.ggml.*`` keys hold it."""

    tokens: list[str]
    types: list[int]
    merges: list[str]  # "a b", in merge order
    pre: str  # the pre-tokenizer name llama.cpp knows
    bos: int | None  # the tokenizer's named BOS id (GPT-2's: <|endoftext|>)
    ends: dict[str, int]  # END_KEYS' name -> id: the ends llama.cpp needs a key for (eos: the
    # tokenizer's named EOS, as templates render it)
    add_bos: bool  # whether a prompt starts with BOS (the tokenizer's post-processor adds it)


def bpe_vocabulary(tokenizer: LMTokenizer, vocab_size: int,
                   end_ids: Iterable[int] = ()) -> Vocabulary:
    """The vocabulary of a byte-level BPE ``tokenizer`` whose pre-tokenizer llama.cpp knows,
    padded with unused ``[PADi]`` tokens to the model's ``vocab_size``, ending at ``end_ids``
    (in order of preference) and the tokenizer's own; any other tokenizer is refused naming
    what llama.cpp lacks."""
    spec = json.loads(tokenizer.hf.to_str())
    model = spec["model"]
    if model.get("type") != "BPE":
        raise UsageError(f"GGUF export needs a BPE tokenizer; this one is a {model.get('type')} "
                         "model (a character vocabulary): llama.cpp has no such tokenizer")
    pre = pre_tokenizer_name(spec)
    vocab = tokenizer.hf.get_vocab()
    tokens = sorted(vocab, key=vocab.__getitem__)
    if [vocab[t] for t in tokens] != list(range(len(tokens))):
        raise UsageError("the tokenizer's ids are not 0..n-1 without gaps; GGUF lists tokens "
                         "by id")
    added = {t["content"]: t.get("special", False) for t in spec.get("added_tokens", [])}
    types = [NORMAL if t not in added else CONTROL if added[t] else USER_DEFINED
             for t in tokens]
    pad = range(len(tokens), vocab_size)
    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])]
    bos = tokenizer.special_id("bos")
    add_bos = bos is not None and tokenizer.encode_prompt("a")[:1] == [bos]
    tokens += [f"[PAD{i}]" for i in pad]
    ends = end_slots(tokens, [tokenizer.eos_id, *end_ids, *sorted(tokenizer.end_ids)])
    return Vocabulary(tokens, types + [UNUSED] * len(pad), merges, pre, bos, ends, add_bos)


def end_slots(tokens: list[str], ends: Iterable[int | None]) -> dict[str, int]:
    """END_KEYS' name -> id for the ``ends`` (ids by ``tokens``, the first the EOS; None
    skipped) llama.cpp does not know by their text; more than the keys hold are refused
    naming them, since llama.cpp would generate on past them."""
    ids = list(dict.fromkeys(i for i in ends if i is not None))
    for i in ids:
        if not 0 <= i < len(tokens):
            raise UsageError(f"end-of-text id {i} is no token of the model's {len(tokens)}")
    eos = ids[:1]  # the EOS keeps its key, known text or not: templates render its text
    keyed = eos + [i for i in ids[1:] if tokens[i] not in END_TEXTS]
    if len(keyed) > len(END_KEYS):
        left = ", ".join(f"{tokens[i]!r} (id {i})" for i in keyed[len(END_KEYS):])
        raise UsageError(f"llama.cpp holds {len(END_KEYS)} end-of-generation ids by key "
                         f"(EOS, EOT, EOM) besides the tokens it knows by their text; this "
                         f"model also ends at {left}, which llama.cpp would generate past")
    return dict(zip(END_KEYS, keyed, strict=False))


def encoded(gguf, array: np.ndarray, kind: str):
    """(data, raw type or None) of a float32 ``array`` as ``kind`` stores it: 1-D tensors and
    float32 as they are, float16 rounded, q8_0 quantised by ``gguf.quants`` (a row whose length
    is no multiple of 32 stays float16, as llama.cpp's converter falls back)."""
    if array.ndim == 1 or kind == "float32":
        return array.astype(np.float32), None
    if kind == "float16" or array.shape[-1] % Q8_BLOCK:
        return array.astype(np.float16), None
    q8 = gguf.GGMLQuantizationType.Q8_0
    return gguf.quants.quantize(array, q8), q8


def numpy32(tensor: torch.Tensor) -> np.ndarray:
    """A tensor as a contiguous float32 numpy array on the CPU."""
    return np.ascontiguousarray(tensor.detach().to("cpu", torch.float32).numpy())


@dataclass(frozen=True)
class Architecture:
    """What one architecture gives the shared writer."""

    name: str  # general.architecture: llama.cpp's name ("gpt2", "llama")
    hparams: Callable[[object], None]  # adds the architecture's keys to a GGUFWriter
    tensors: dict[str, np.ndarray]  # GGUF tensor name -> float32 array (numpy's row order)


def add_shape(writer, c: LMConfig) -> None:
    """The keys every architecture has: context, width, feed-forward width, blocks, heads."""
    writer.add_context_length(c.max_len)
    writer.add_embedding_length(c.d_model)
    writer.add_feed_forward_length(c.d_ff)
    writer.add_block_count(c.n_layers)
    writer.add_head_count(c.n_heads)


def write_gguf(out: str | Path, overwrite: bool, arch: Architecture, vocabulary: Vocabulary,
               kind: str, manifest: dict, chat_template: str | None = None) -> Path:
    """Write ``out``/model.gguf (``arch``'s tensors as ``kind``, its keys, the vocabulary and
    the chat template) and decoderkit's manifest, atomically; ``overwrite`` replaces only an
    earlier export."""
    check_choice("--type", kind, GGUF_TYPES)
    gguf = import_extra("gguf")
    file_type = {"float32": gguf.LlamaFileType.ALL_F32, "float16": gguf.LlamaFileType.MOSTLY_F16,
                 "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0}[kind]

    def fill(tmp: Path) -> None:
        writer = gguf.GGUFWriter(tmp / FILE, arch.name)
        writer.add_type(gguf.GGUFType.MODEL)
        writer.add_file_type(file_type)
        writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
        arch.hparams(writer)
        _add_vocabulary(writer, vocabulary)
        if chat_template is not None:
            writer.add_chat_template(chat_template)
        for name, array in arch.tensors.items():
            data, raw = encoded(gguf, array, kind)
            writer.add_tensor(name, data, raw_dtype=raw)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        record = manifest | {"engine": ENGINE, "file": FILE, "type": kind}
        write_atomic(tmp / MANIFEST, lambda f: f.write_text(json.dumps(record, indent=2)))

    return write_directory(out, overwrite, fill)


def _add_vocabulary(writer, vocabulary: Vocabulary) -> None:
    """The ``tokenizer.ggml.*`` keys: GPT-2's BPE model, the pre-tokenizer, tokens, types,
    merges, BOS where the tokenizer names it, the keyed end-of-generation ids, and whether a
    prompt starts with BOS (as ``LMTokenizer.encode_prompt`` encodes it)."""
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(vocabulary.pre)
    writer.add_token_list(vocabulary.tokens)
    writer.add_token_types(vocabulary.types)
    writer.add_token_merges(vocabulary.merges)
    if vocabulary.bos is not None:
        writer.add_bos_token_id(vocabulary.bos)
    keys = {"eos": writer.add_eos_token_id, "eot": writer.add_eot_token_id,
            "eom": writer.add_eom_token_id}
    for key, token in vocabulary.ends.items():
        keys[key](token)
    writer.add_add_bos_token(vocabulary.add_bos)
