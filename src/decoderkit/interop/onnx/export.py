"""Export to ONNX: an encoder graph and a decoder-step graph with explicit caches.

``encoder.onnx``: src (B, S) int64, src_mask (B, 1, S) bool -> cross_kv (B, 2N, h, S, d_k),
every decoder layer's cross-attention keys and values (layer i: rows 2i, 2i + 1), projected
from the encoder output once: all the decoder ever reads of the source.
``decoder_step.onnx``: tokens (R, 1) int64 at positions (1, 1) int64 (the step t), src_mask
(R, 1, S) bool, cross_keys, cross_values (N, R, h, S, d_k), self_keys, self_values (N, R, h, t,
d_k) (the t decoded positions' self-attention keys/values; t = 0 at the first step) ->
logprobs (R, V) of the next token, new_keys, new_values (N, R, h, 1, d_k): the step's own,
which the caller writes into its ``KVCache`` at position t. Batch, source and prefix lengths
are dynamic; torch.onnx's current (dynamo) exporter, opset ``OPSET``. The graphs run our own
modules (``decode_step`` itself on a ``DecoderCache`` over these tensors, written at the
positions given); ``interop.onnx.runtime`` runs our search loops on them.
"""

from __future__ import annotations

import logging
import warnings
from contextlib import contextmanager
from pathlib import Path

import torch
from torch import Tensor, nn

from decoderkit.base.errors import UsageError
from decoderkit.generation.seq2seq.decoding import decode_step
from decoderkit.interop.artifacts import import_extra, write_directory
from decoderkit.interop.seq2seq.manifest import write_manifest
from decoderkit.nn.cache import At, KVCache
from decoderkit.nn.cross_cache import CrossKV, DecoderCache
from decoderkit.nn.seq2seq.model import EncoderDecoder
from decoderkit.training.seq2seq.checkpoint import Checkpoint

ENGINE = "onnxruntime"
OPSET = 18
ENCODER, DECODER = "encoder.onnx", "decoder_step.onnx"
STEP_INPUTS = ("tokens", "positions", "src_mask", "cross_keys", "cross_values", "self_keys",
               "self_values")
STEP_OUTPUTS = ("logprobs", "new_keys", "new_values")


class EncoderGraph(nn.Module):
    """src, src_mask -> every decoder layer's cross-attention keys/values, stacked."""

    def __init__(self, model: EncoderDecoder):
        super().__init__()
        self.model = model

    def forward(self, src: Tensor, src_mask: Tensor) -> Tensor:
        memory = self.model.encode(src, src_mask)  # (B, S, d)
        kv = [t for layer in self.model.decoder.layers
              for t in layer.cross_attn.project_kv(memory)]  # 2N x (B, h, S, d_k)
        return torch.stack(kv, dim=1)  # (B, 2N, h, S, d_k)


class DecoderStepGraph(nn.Module):
    """One cached decoding step: ``decode_step`` over tensors in, tensors out."""

    def __init__(self, model: EncoderDecoder):
        super().__init__()
        self.model = model

    def forward(self, tokens: Tensor, positions: Tensor, src_mask: Tensor, cross_keys: Tensor,
                cross_values: Tensor, self_keys: Tensor, self_values: Tensor
                ) -> tuple[Tensor, Tensor, Tensor]:
        N, R, h, t, d_k = self_keys.shape
        room = self_keys.new_zeros(R, h, 2, d_k)  # position t, and the scratch one
        keys, values = ([torch.cat([layer, room], dim=2) for layer in past.unbind(0)]
                        for past in (self_keys, self_values))  # a tensor a layer (over)
        cache = DecoderCache(KVCache.over(keys, values), CrossKV(cross_keys, cross_values))
        at = At(positions, positions, t + 1, None)  # every row at t, seeing 0..t
        # memory is never read (the cache holds its keys/values); only its width is checked
        memory = cross_keys.new_zeros(1, 1, self.model.config.d_model)
        logp = decode_step(self.model, memory, src_mask, tokens, None, cache, at)  # (R, V)
        return logp, *(torch.stack([layer[:, :, t:t + 1] for layer in written])
                       for written in (keys, values))


def examples(model: EncoderDecoder, batch: int = 2, source: int = 5, past: int = 3):
    """Example inputs of both graphs (sizes above 1, so the exporter keeps them dynamic)."""
    c = model.config
    d_k = c.d_model // c.n_heads
    src = torch.full((batch, source), 4 % c.src_vocab, dtype=torch.long)
    src_mask = torch.ones(batch, 1, source, dtype=torch.bool)
    cross = torch.zeros(c.n_layers, batch, c.n_heads, source, d_k)
    past_kv = torch.zeros(c.n_layers, batch, c.n_heads, past, d_k)
    tokens = torch.full((batch, 1), c.bos_id, dtype=torch.long)
    positions = torch.full((1, 1), past, dtype=torch.long)
    # distinct tensors each (one passed twice would be one input of the graph)
    return (src, src_mask), (tokens, positions, src_mask, cross, cross.clone(), past_kv,
                             past_kv.clone())


def export_graphs(model: EncoderDecoder, directory: Path) -> None:
    """Write ``ENCODER`` and ``DECODER`` for ``model`` (float32, eval) into ``directory``."""
    import_extra("onnxscript")  # the dynamo exporter's dependency
    onnx = import_extra("onnx")
    c = model.config
    model = model.eval()
    batch, source = torch.export.Dim("batch"), torch.export.Dim("source", max=c.max_len)
    past = torch.export.Dim("past", min=0, max=c.max_len - 1)
    (src, src_mask), step_inputs = examples(model)
    kv = {1: batch, 3: source}
    jobs = [(EncoderGraph(model), (src, src_mask), ["src", "src_mask"], ["cross_kv"],
             ({0: batch, 1: source}, {0: batch, 2: source}), ENCODER),
            (DecoderStepGraph(model), step_inputs, list(STEP_INPUTS), list(STEP_OUTPUTS),
             ({0: batch}, {}, {0: batch, 2: source}, kv, kv, {1: batch, 3: past},
              {1: batch, 3: past}), DECODER)]
    for module, inputs, names, outputs, shapes, file in jobs:
        with torch.no_grad(), warnings.catch_warnings(), _quiet("torch.onnx"):
            warnings.simplefilter("ignore")  # the exporter's notes on its own internals
            program = torch.onnx.export(module, inputs, dynamo=True, opset_version=OPSET,
                                        input_names=names, output_names=outputs,
                                        dynamic_shapes=shapes, verbose=False, optimize=False)
        program.save(str(directory / file))
        onnx.checker.check_model(str(directory / file))


@contextmanager
def _quiet(logger: str):
    """The exporter logs a line per optional operator library it does not find: errors only."""
    log = logging.getLogger(logger)
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        log.setLevel(level)


def export_onnx(ckpt: Checkpoint, out: str | Path, overwrite: bool = False) -> Path:
    """Write ``ckpt`` as ``out``: the two graphs, our manifest and tokenizers; check that ONNX
    Runtime loads both graphs, then rename the directory into place."""
    ort = import_extra("onnxruntime")
    model = ckpt.model
    if not isinstance(model, EncoderDecoder):
        raise UsageError(f"expected a checkpoint's EncoderDecoder, got {type(model).__name__}")

    def fill(tmp: Path) -> None:
        export_graphs(model.to("cpu").float(), tmp)
        write_manifest(tmp, ENGINE, "float32", ckpt)
        for file in (ENCODER, DECODER):  # the check: ONNX Runtime loads each graph
            ort.InferenceSession(str(tmp / file), providers=["CPUExecutionProvider"])

    return write_directory(out, overwrite, fill)
