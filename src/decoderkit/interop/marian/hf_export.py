"""Export to Hugging Face Marian: a directory ``MarianMTModel.from_pretrained`` and
``MarianTokenizer`` load, computing what the checkpoint computes.

The inverse of ``interop.marian``: our packed q, k, v rows split into ``q_proj``, ``k_proj``,
``v_proj``; the generator's bias as ``final_logits_bias``; the sentencepiece models and
vocabularies written back as ``source.spm``, ``target.spm``, ``vocab.json`` (and
``target_vocab.json`` when the sides differ). Offered for checkpoints that came from a Marian
directory (fine-tuned or not). A checkpoint trained here is refused, with the reason: its
tokenizers are ``tokenizers`` BPE, which ``MarianTokenizer`` (sentencepiece only) cannot load.
(Its weights alone could be written exactly: the interleaved sinusoids are one permutation of
the residual stream's channels away from Marian's split ones.)
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import torch
from safetensors.torch import save_file

from decoderkit.base.errors import UsageError
from decoderkit.base.files import write_atomic
from decoderkit.interop.artifacts import write_directory
from decoderkit.interop.seq2seq.manifest import write_manifest
from decoderkit.interop.huggingface import CONFIG, SAFETENSORS
from decoderkit.interop.marian.hf import (
    ACTIVATIONS,
    SOURCE_SPM,
    TARGET_SPM,
    TARGET_VOCAB,
    TOKENIZER_CONFIG,
    VOCAB,
    load_marian,
    weight_names,
)
from decoderkit.nn.seq2seq.model import ModelConfig
from decoderkit.nn.layers import inner_dropouts
from decoderkit.training.seq2seq.checkpoint import Checkpoint
from decoderkit.text.seq2seq.spm_tokenizer import SentencePieceTokenizer

ENGINE = "transformers"
HF_ACTIVATIONS = {ours: hf for hf, ours in ACTIVATIONS.items() if hf != "silu"}  # ours -> HF


def check_exportable(ckpt: Checkpoint) -> None:
    """Refuse, naming the reason, a checkpoint Marian cannot hold exactly."""
    c = ckpt.config
    if not all(isinstance(t, SentencePieceTokenizer)
               for t in (ckpt.src_tokenizer, ckpt.tgt_tokenizer)):
        raise UsageError("--to transformers writes Marian directories, whose tokenizers are "
                         "sentencepiece models: this checkpoint's are tokenizers BPE "
                         "(trained by decoderkit), which MarianTokenizer cannot load; export "
                         "a checkpoint that came from a Marian directory")
    fixed = {"positions": "split", "norm_first": False, "layer_norm": "standard", "bias": True,
             "source_pad_id": c.pad_id}  # Hugging Face's one pad_token_id pads both sides
    for name, value in fixed.items():
        if getattr(c, name) != value:
            raise UsageError(f"Marian cannot express {name}={getattr(c, name)!r} "
                             f"(Marian: {value!r})")


def marian_config(c: ModelConfig) -> dict:
    """``config.json`` of the Marian model holding ``c``'s model."""
    attention_p, ffn_p = inner_dropouts(c.dropout, c.attention_dropout, c.ffn_dropout)
    return {"model_type": "marian", "architectures": ["MarianMTModel"],
            "vocab_size": c.src_vocab, "decoder_vocab_size": c.tgt_vocab, "d_model": c.d_model,
            "encoder_layers": c.n_layers, "decoder_layers": c.n_layers,
            "encoder_attention_heads": c.n_heads, "decoder_attention_heads": c.n_heads,
            "encoder_ffn_dim": c.d_ff, "decoder_ffn_dim": c.d_ff,
            "activation_function": HF_ACTIVATIONS[c.activation], "dropout": c.dropout,
            "attention_dropout": attention_p, "activation_dropout": ffn_p,
            "max_position_embeddings": c.max_len, "scale_embedding": c.scale_embeddings,
            "pad_token_id": c.pad_id, "eos_token_id": c.eos_id, "forced_eos_token_id": c.eos_id,
            "decoder_start_token_id": c.bos_id, "bad_words_ids": [[c.pad_id]],
            "share_encoder_decoder_embeddings": c.tie_embeddings and c.tie_generator,
            "tie_word_embeddings": c.tie_generator, "is_encoder_decoder": True}


def marian_tensors(ckpt: Checkpoint) -> dict[str, torch.Tensor]:
    """HF tensor name -> tensor (float32, each its own storage) of ``ckpt``'s model.

    Shared source/target embeddings under an untied generator are written as two copies:
    transformers 5 shares nothing when ``tie_word_embeddings`` is false."""
    c = ckpt.config
    view = dataclasses.replace(c, tie_embeddings=c.tie_embeddings and c.tie_generator)
    state = ckpt.model.state_dict()
    out = {}
    for ours, src in weight_names(view).params.items():
        value = state[ours].detach().to("cpu", torch.float32)
        if src.leading_one:
            value = value[None]  # (1, V)
        for name, part in zip(src.names, value.chunk(len(src.names)), strict=True):
            out[name] = part.clone().contiguous()
    return out


def _write_tokenizers(directory: Path, src: SentencePieceTokenizer,
                      tgt: SentencePieceTokenizer) -> None:
    separate = src.vocab != tgt.vocab
    (directory / SOURCE_SPM).write_bytes(src.model)
    (directory / TARGET_SPM).write_bytes(tgt.model)
    files = {VOCAB: src.vocab, **({TARGET_VOCAB: tgt.vocab} if separate else {}),
             TOKENIZER_CONFIG: {"tokenizer_class": "MarianTokenizer", "separate_vocabs": separate,
                                "eos_token": src.eos, "unk_token": src.unk,
                                "pad_token": src.pad}}
    for name, data in files.items():
        text = json.dumps(data, ensure_ascii=False, indent=1)
        write_atomic(directory / name, lambda tmp, text=text: tmp.write_text(text, "utf-8"))


def export_transformers(ckpt: Checkpoint, out: str | Path, overwrite: bool = False) -> Path:
    """Write ``ckpt`` as a Hugging Face Marian directory ``out`` (with our manifest, so it is
    also an export ``--overwrite`` may replace); read back with ``interop.marian`` and
    compared tensor by tensor before it is renamed into place."""
    check_exportable(ckpt)

    def fill(tmp: Path) -> None:
        tensors = marian_tensors(ckpt)
        save_file(tensors, str(tmp / SAFETENSORS), metadata={"format": "pt"})
        text = json.dumps(marian_config(ckpt.config), indent=2)
        write_atomic(tmp / CONFIG, lambda t: t.write_text(text))
        _write_tokenizers(tmp, ckpt.src_tokenizer, ckpt.tgt_tokenizer)
        write_manifest(tmp, ENGINE, "float32", ckpt)
        back = load_marian(tmp)  # the check: our own reader gives the same model
        c = ckpt.config
        if back.config != dataclasses.replace(c, tie_embeddings=c.tie_embeddings
                                              and c.tie_generator):
            raise RuntimeError(f"exported config reads back as {back.config}")  # a bug
        mine = ckpt.model.state_dict()
        for name, value in back.model.state_dict().items():
            if not torch.equal(value, mine[name].to("cpu", value.dtype)):
                raise RuntimeError(f"exported tensor {name} reads back changed")  # a bug

    return write_directory(out, overwrite, fill)
