"""Export to Marian's own format: ``model.npz`` (Marian's tensors and its options as
``special:model.yml``), ``model.npz.decoder.yml`` and the sentencepiece vocabularies it names
(``vocab.spm``, or ``source.spm`` / ``target.spm`` when the sides differ), what
``marian-decoder`` and ``pymarian.Translator`` load.

The inverse of ``interop.marian.npz``, through its name map (``weight_names``) read backwards:
our packed q, k, v split into ``Wq`` / ``Wk`` / ``Wv`` and every matrix written (in, out); the
decoder's start row (id V, our bos and pad) dropped, since Marian starts from an all-zero
vector. So only a model that is Marian's in every rule exports: one read from a Marian
``.npz`` (converted, or fine-tuned by ``train --resume``: the start rows are then checked to
be still zero). Anything else is refused, naming the reason. Read back with ``interop.marian.npz``
and compared tensor by tensor before it is renamed into place.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import torch
import yaml

from decoderkit.base.errors import UsageError
from decoderkit.base.files import write_atomic
from decoderkit.interop.artifacts import write_directory
from decoderkit.interop.seq2seq.manifest import write_manifest
from decoderkit.interop.marian.npz import (
    DECODER_YML,
    MODEL,
    OPTIONS,
    load_marian_npz,
    weight_names,
    without_start_rows,
)
from decoderkit.interop.marian.npz_options import ACTIVATIONS, Layout
from decoderkit.nn.seq2seq.model import ModelConfig
from decoderkit.nn.layers import inner_dropouts
from decoderkit.training.seq2seq.checkpoint import Checkpoint
from decoderkit.text.seq2seq.spm_tokenizer import SentencePieceTokenizer

ENGINE = "marian"
JOINT, SOURCE, TARGET = "vocab.spm", "source.spm", "target.spm"
MARIAN_ACTIVATIONS = {ours: marian for marian, ours in ACTIVATIONS.items()}  # ours -> Marian


def check_exportable(ckpt: Checkpoint) -> None:
    """Refuse, naming the reason, a checkpoint that Marian's rules cannot hold exactly."""
    c = ckpt.config
    if not all(isinstance(t, SentencePieceTokenizer) for t in (ckpt.src_tokenizer,
                                                               ckpt.tgt_tokenizer)):
        raise UsageError("--to marian needs sentencepiece vocabularies; this checkpoint's "
                         "tokenizers are tokenizers BPE: export a checkpoint read from a Marian "
                         "model.npz (converted or fine-tuned)")
    fixed = {"positions": "marian", "scale_embeddings": True, "layer_norm": "standard",
             "bias": True, "eos_id": 0, "pad_id": c.tgt_vocab - 1, "bos_id": c.tgt_vocab - 1,
             "source_pad_id": c.src_vocab - 1}
    for name, value in fixed.items():
        if getattr(c, name) != value:
            raise UsageError(f"--to marian: Marian cannot express {name}={getattr(c, name)!r} "
                             f"(a model read from a Marian .npz has {value!r})")
    if c.activation not in MARIAN_ACTIVATIONS:
        raise UsageError(f"--to marian: Marian has no FFN activation {c.activation!r}")
    state = ckpt.model.state_dict()
    for side, tok, row, size in (("src", ckpt.src_tokenizer, c.source_pad_id, c.src_vocab),
                                 ("tgt", ckpt.tgt_tokenizer, c.pad_id, c.tgt_vocab)):
        if state[f"{side}_embed.lut.weight"][row].abs().max() != 0:
            raise UsageError(f"--to marian: {side}_embed.lut.weight row {row} (Marian's added "
                             "zero row) is not zero, but Marian starts from an all-zero vector: "
                             "this model cannot be written exactly")
        if tok.vocab.get(tok.pad) != row or len(tok.vocab) != size:
            raise UsageError(f"--to marian: the {side} vocabulary is not a Marian vocabulary "
                             f"plus its added start token {tok.pad!r} at id {row}")


def layout_of(c: ModelConfig) -> Layout:
    """Which embeddings Marian stores for ``c``'s ties."""
    return Layout(tied_all=c.tie_embeddings and c.tie_generator,
                  tied_src=c.tie_embeddings and not c.tie_generator, omit_bias=False)


def marian_options(c: ModelConfig) -> dict:
    """``special:model.yml``: the options that define ``c``'s model in Marian."""
    layout = layout_of(c)
    attention_p, ffn_p = inner_dropouts(c.dropout, c.attention_dropout, c.ffn_dropout)
    return {"type": "transformer", "dim-emb": c.d_model, "enc-depth": c.n_layers,
            "dec-depth": c.n_layers, "transformer-heads": c.n_heads,
            "transformer-dim-ffn": c.d_ff, "transformer-decoder-dim-ffn": 0,
            "transformer-ffn-depth": 2, "transformer-decoder-ffn-depth": 0,
            "transformer-ffn-activation": MARIAN_ACTIVATIONS[c.activation],
            "transformer-preprocess": "n" if c.norm_first else "",
            "transformer-postprocess": "da" if c.norm_first else "dan",
            "transformer-postprocess-top": "n" if c.norm_first else "",
            "transformer-postprocess-emb": "d", "transformer-decoder-autoreg": "self-attention",
            "tied-embeddings-all": layout.tied_all, "tied-embeddings-src": layout.tied_src,
            "tied-embeddings": c.tie_generator and not c.tie_embeddings,
            "output-omit-bias": False, "dim-vocabs": [c.src_vocab - 1, c.tgt_vocab - 1],
            "right-left": False,
            "transformer-dropout": c.dropout, "transformer-dropout-attention": attention_p,
            "transformer-dropout-ffn": ffn_p}


def marian_tensors(ckpt: Checkpoint) -> dict[str, np.ndarray]:
    """Marian's tensor name -> float32 array of ``ckpt``'s model, the start rows dropped."""
    c = ckpt.config
    state = ckpt.model.state_dict()
    out = {}
    for ours, src in weight_names(without_start_rows(c), layout_of(c)).params.items():
        value = state[ours].detach().to("cpu", torch.float32)
        if ours.endswith("lut.weight") or ours.startswith("generator."):
            value = value[:-1]  # the start row
        for name, part in zip(src.names, value.chunk(len(src.names)), strict=True):
            part = part.t() if src.transposed else part[None] if src.leading_one else part
            out[name] = part.contiguous().numpy()
    return out


def _npz(tensors: dict[str, np.ndarray], options: dict) -> bytes:
    """The ``.npz`` bytes: the tensors and the options' YAML as NUL-ended int8 characters."""
    text = yaml.safe_dump(options, sort_keys=True).encode("utf-8") + b"\0"
    buffer = io.BytesIO()
    np.savez(buffer, **tensors, **{OPTIONS: np.frombuffer(text, dtype=np.int8)})
    return buffer.getvalue()


def export_marian(ckpt: Checkpoint, out: str | Path, overwrite: bool = False) -> Path:
    """Write ``ckpt`` as a Marian model directory ``out`` (with our manifest, so it is also an
    export ``--overwrite`` may replace), checked by reading it back."""
    check_exportable(ckpt)
    src, tgt = ckpt.src_tokenizer, ckpt.tgt_tokenizer
    vocabs = [JOINT, JOINT] if src.model == tgt.model else [SOURCE, TARGET]

    def fill(tmp: Path) -> None:
        body = _npz(marian_tensors(ckpt), marian_options(ckpt.config))
        write_atomic(tmp / MODEL, lambda t: t.write_bytes(body))
        for name, tok in zip(vocabs, (src, tgt), strict=True):
            (tmp / name).write_bytes(tok.model)
        decoder = yaml.safe_dump({"relative-paths": True, "models": [MODEL], "vocabs": vocabs,
                                  "beam-size": 4, "normalize": 0.6, "mini-batch": 32,
                                  "maxi-batch": 100})
        write_atomic(tmp / (MODEL + DECODER_YML), lambda t: t.write_text(decoder))
        write_manifest(tmp, ENGINE, "float32", ckpt)
        back = load_marian_npz(tmp)  # the check: our own reader gives the same model
        mine = ckpt.model.state_dict()
        for name, value in back.model.state_dict().items():
            if name.endswith(".pe"):
                continue  # the sinusoids' table: computed, of the reader's own length
            if not torch.equal(value, mine[name].to("cpu", value.dtype)):
                raise RuntimeError(f"exported tensor {name} reads back changed")  # a bug

    return write_directory(out, overwrite, fill)
