"""Our greedy and beam search over ONNX Runtime sessions of an ONNX export.

``OnnxRuntimeModel`` is a decoding ``Engine`` (``decoderkit.generation.seq2seq.step``):
``encode`` runs ``encoder.onnx`` and returns what the decoder reads of the source (every layer's
cross-attention keys/values, stacked, in place of ``memory``); ``new_cache`` holds them and
the growing self-attention keys/values; ``step`` runs ``decoder_step.onnx``. Search code,
options and results are those of ``greedy_decode`` / ``beam_search`` / ``translate_lines``.

Legend: B sources, R decoder rows (B, or B * beam), N layers, S source length, t decoded.
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
from decoderkit.interop.manifest import read_manifest
from decoderkit.interop.onnx.export import DECODER, ENCODER, ENGINE
from decoderkit.nn.seq2seq.model import ModelConfig
from decoderkit.text.seq2seq.tokenizer import Tokenizer


class OnnxCache:
    """The decoding cache of ``OnnxRuntimeModel``: cross keys/values, self keys/values.

    cross (B, 2N, h, S, d_k) stays one row per source until the step first sees more rows
    (beam search's hypotheses); it is then repeated once, as each source's rows never mix.
    """

    def __init__(self, cross: Tensor, n_heads: int):
        B, layers2, _, _, d_k = cross.shape
        self.cross = cross
        self.self_kv = cross.new_empty(B, layers2, n_heads, 0, d_k)  # (R, 2N, h, t, d_k)
        self.mask: Tensor | None = None  # src_mask repeated like cross

    @property
    def length(self) -> int:
        """Target positions decoded so far."""
        return self.self_kv.size(3)

    def reorder(self, rows: Tensor) -> None:
        """Keep self-attention rows ``rows``, each from a row of the same source (beams): the
        cross rows stay (an engine's batch never drops a source: ``search.compacting``)."""
        self.self_kv = self.self_kv.index_select(0, rows)

    def rows(self, R: int, src_mask: Tensor | None) -> tuple[Tensor, Tensor]:
        """cross (R, 2N, h, S, d_k) and src_mask (R, 1, S) for R decoder rows."""
        B, S = self.cross.size(0), self.cross.size(3)
        if self.cross.size(0) != R:  # once: a source's hypotheses as consecutive rows
            self.cross = self.cross.repeat_interleave(R // B, dim=0).contiguous()
        if self.mask is None or self.mask.size(0) != R:
            mask = src_mask if src_mask is not None else \
                torch.ones(B, 1, S, dtype=torch.bool)
            self.mask = mask if mask.size(0) == R else mask.repeat_interleave(R // B, dim=0)
        return self.cross, self.mask


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

    def new_cache(self, memory: Tensor, max_len: int) -> OnnxCache:
        """An empty cache for ``memory`` from ``encode``."""
        return OnnxCache(memory, self.config.n_heads)

    def step(self, model, memory: Tensor, src_mask: Tensor | None, tgt: Tensor,
             tgt_mask: Tensor | None, cache: OnnxCache | None, record=None) -> Tensor:
        """``decode_step``'s signature: tgt (R, 1) newest tokens -> (R, V) log-probabilities."""
        if cache is None or tgt.size(1) != 1:
            raise UsageError("ONNX Runtime decodes with its cache only (use_cache=True)")
        if record is not None:
            raise UsageError("ONNX Runtime does not return attention weights (no explain)")
        cross, mask = cache.rows(tgt.size(0), src_mask)
        logp, present = self.decoder.run(None, {
            "tokens": _np(tgt), "src_mask": _np(mask), "cross_kv": _np(cross),
            "self_kv": _np(cache.self_kv)})
        cache.self_kv = torch.from_numpy(present)
        return torch.from_numpy(logp)


def graph_signature(file: str, config: ModelConfig) -> dict[str, tuple]:
    """What the graph ``file`` (``ENCODER`` or ``DECODER``) of a model of ``config`` takes and
    gives: name -> shape, a size the config fixes as an int, a dynamic one as None."""
    c = config
    d_k, layers = c.d_model // c.n_heads, 2 * c.n_layers
    kv = (None, layers, c.n_heads, None, d_k)
    if file == ENCODER:
        return {"src": (None, None), "src_mask": (None, 1, None), "cross_kv": kv}
    return {"tokens": (None, 1), "src_mask": (None, 1, None), "cross_kv": kv, "self_kv": kv,
            "logprobs": (None, c.tgt_vocab), "present_self_kv": kv}


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
