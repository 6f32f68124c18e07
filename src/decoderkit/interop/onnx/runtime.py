"""Our greedy and beam search over ONNX Runtime sessions of an ONNX export.

``OnnxRuntimeModel`` is a decoding ``Engine`` (``decoderkit.generation.seq2seq.step``):
``encode`` runs ``encoder.onnx`` and returns what the decoder reads of the source (every layer's
cross-attention keys/values, a ``CrossKV``, in place of ``memory``); ``new_cache`` gives the
``DecoderCache`` holding them and a ``KVCache`` of the self-attention keys/values; ``step``
runs ``decoder_step.onnx`` on the filled positions and writes the step's keys and values into
that cache at the step's position. Search code,
options and results are those of ``greedy_decode`` / ``beam_search`` / ``translate_lines``.

Legend: B sources, R decoder rows (B, or B * beam), N layers, h heads, S source length, t
decoded.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from decoderkit.base.errors import UsageError
from decoderkit.generation.seq2seq.translate import DecodeOptions, Translation, translate_lines
from decoderkit.interop.artifacts import MANIFEST, engine_file, import_extra
from decoderkit.interop.seq2seq.manifest import read_manifest
from decoderkit.interop.onnx.export import DECODER, ENCODER, ENGINE, STEP_INPUTS, STEP_OUTPUTS
from decoderkit.nn.cache import At, KVCache
from decoderkit.nn.cross_cache import CrossKV, DecoderCache
from decoderkit.nn.seq2seq.model import ModelConfig
from decoderkit.text.seq2seq.tokenizer import Tokenizer


class OnnxRuntimeModel:
    """The two graphs of an ONNX export in ONNX Runtime sessions, for our search loops."""

    training = False  # inference only: no dropout, nothing to train
    engine = ENGINE  # what it lacks: generation.engines.UNAVAILABLE

    def __init__(self, directory: str | Path, config: ModelConfig, threads: int = 0):
        ort = import_extra("onnxruntime")
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads  # 0: ONNX Runtime's default
        options.inter_op_num_threads = 1
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        self.config = config
        self.encoder, self.decoder = (_session(ort, engine_file(directory, f), options)
                                      for f in (ENCODER, DECODER))
        for file, session in ((ENCODER, self.encoder), (DECODER, self.decoder)):
            check_graph(Path(directory) / file, session, config)

    def eval(self) -> OnnxRuntimeModel:
        return self

    def train(self, mode: bool = True) -> OnnxRuntimeModel:
        if mode:
            raise UsageError("an ONNX Runtime model is for inference only")
        return self

    def encode(self, src: Tensor, src_mask: Tensor | None = None) -> Tensor:
        """src (B, S) -> every decoder layer's cross-attention keys/values (B, 2N, h, S, d_k)."""
        if src_mask is None:
            src_mask = torch.ones(src.size(0), 1, src.size(1), dtype=torch.bool)
        (cross,) = self.encoder.run(None, {"src": _np(src), "src_mask": _np(src_mask)})
        return torch.from_numpy(cross)

    def new_cache(self, memory: Tensor, max_len: int) -> DecoderCache:
        """An empty cache for ``memory`` from ``encode``: its keys and values as a ``CrossKV``
        (N, B, h, S, d_k), laid out once."""
        c, B = self.config, memory.size(0)
        cross = CrossKV(*(memory[:, i::2].transpose(0, 1).contiguous() for i in (0, 1)))
        return DecoderCache(KVCache(c.n_layers, c.n_heads, max_len, c.d_model // c.n_heads,
                                    slots=B, dtype=torch.float32, device="cpu"), cross)

    def step(self, model, memory: Tensor, src_mask: Tensor | None, tgt: Tensor,
             tgt_mask: Tensor | None, cache: DecoderCache | None, at: At | None = None,
             record=None) -> Tensor:
        """``decode_step``'s signature: tgt (R, 1) newest tokens at ``at`` (every row at one
        position t) -> (R, V) log-probabilities."""
        if cache is None or tgt.size(1) != 1:
            raise UsageError("ONNX Runtime decodes with its cache only (use_cache=True)")
        if record is not None:
            raise UsageError("ONNX Runtime does not return attention weights (no explain)")
        R, cross, t = tgt.size(0), cache.cross, at.window - 1
        B, S = cross.keys.size(1), cross.keys.size(3)
        if B != R:  # once: a source's hypotheses as consecutive rows (their rows never mix)
            cache.cross = cross = CrossKV(*(x.repeat_interleave(R // B, dim=1).contiguous()
                                            for x in (cross.keys, cross.values)))
        mask = torch.ones(B, 1, S, dtype=torch.bool) if src_mask is None else src_mask
        keys, values = (x[:, :R, :, :t] for x in (cache.self_kv.keys[0], cache.self_kv.values[0]))
        logp, new_keys, new_values = self.decoder.run(None, {
            "tokens": _np(tgt), "positions": _np(at.positions), "src_mask":
            _np(mask.repeat_interleave(R // mask.size(0), dim=0)),
            "cross_keys": _np(cross.keys), "cross_values": _np(cross.values),
            "self_keys": _np(keys), "self_values": _np(values)})
        for layer, (k, v) in enumerate(zip(new_keys, new_values, strict=True)):
            cache.self_kv.write(layer, torch.from_numpy(k), torch.from_numpy(v), at)
        return torch.from_numpy(logp)


def graph_signature(file: str, config: ModelConfig) -> dict[str, tuple]:
    """What the graph ``file`` (``ENCODER`` or ``DECODER``) of a model of ``config`` takes and
    gives: name -> shape, a size the config fixes as an int, a dynamic one as None."""
    c = config
    kv = (c.n_layers, None, c.n_heads, None, c.d_model // c.n_heads)
    if file == ENCODER:
        return {"src": (None, None), "src_mask": (None, 1, None),
                "cross_kv": (None, 2 * c.n_layers, c.n_heads, None, c.d_model // c.n_heads)}
    shapes = ((None, 1), (1, 1), (None, 1, None), kv, kv, kv, kv, (None, c.tgt_vocab), kv, kv)
    return dict(zip(STEP_INPUTS + STEP_OUTPUTS, shapes, strict=True))


def check_graph(file: Path, session, config: ModelConfig) -> None:
    """The graph in ``file`` must take and give what ``graph_signature`` says for the
    manifest's ``config``: its inputs and outputs by name and every fixed size; else a
    ``UsageError`` naming the file and both values (graphs swapped, or the manifest edited)."""
    want = graph_signature(file.name, config)
    got = {a.name: tuple(d if isinstance(d, int) else None for d in a.shape)
           for a in (*session.get_inputs(), *session.get_outputs())}
    if set(got) != set(want):
        raise UsageError(f"{file}: a graph of {', '.join(got)}, not the {file.stem} graph of "
                         f"{', '.join(want)} (graphs swapped, or from another export?)")
    for name, shape in want.items():
        if len(got[name]) != len(shape) or any(
                w is not None and g != w for g, w in zip(got[name], shape, strict=True)):
            raise UsageError(f"{file}: the graph's {name} has the shape {_dims(got[name])}, but "
                             f"the config in {MANIFEST} gives {_dims(shape)}")


def _dims(shape: tuple) -> str:
    return "(" + ", ".join("*" if d is None else str(d) for d in shape) + ")"


def _session(ort, file: str, options):
    """An ONNX Runtime session of the graph ``file``; one it cannot load is a UsageError."""
    try:
        return ort.InferenceSession(file, options, providers=["CPUExecutionProvider"])
    except Exception as err:  # ONNX Runtime's own exception types (InvalidProtobuf, Fail, ...)
        first = str(err).splitlines()[0] if str(err) else ""
        raise UsageError(f"{file}: ONNX Runtime cannot load this graph "
                         f"({type(err).__name__}: {first})") from None


def _np(t: Tensor) -> np.ndarray:
    return t.detach().contiguous().numpy()


@dataclass
class OnnxExport:
    """An ONNX export loaded for ``translate_lines``: the fields it reads of a Checkpoint."""

    model: OnnxRuntimeModel
    manifest: dict  # decoderkit.json: engine, weights, config, data settings
    config: ModelConfig
    src_tokenizer: Tokenizer
    tgt_tokenizer: Tokenizer

    @property
    def meta(self) -> dict:
        """What ``translate`` reads of a checkpoint's meta: its decoding defaults, if any, and
        its origin (a Marian directory's: Hugging Face's beam rule)."""
        return {"generation": self.manifest.get("generation", {}),
                "origin": self.manifest.get("origin")}

    def translate_lines(self, lines: list[str], options: DecodeOptions,
                        batch_size: int = 32) -> list[Translation]:
        """``decoderkit.generation.seq2seq.translate.translate_lines`` on this export."""
        return translate_lines(self, lines, options, batch_size)


def load_onnx(directory: str | Path, threads: int = 0) -> OnnxExport:
    """An export directory from ``export_onnx`` in ONNX Runtime sessions."""
    manifest, config, src_tok, tgt_tok = read_manifest(directory, ENGINE, (ENCODER, DECODER))
    return OnnxExport(OnnxRuntimeModel(directory, config, threads), manifest, config, src_tok,
                      tgt_tok)
