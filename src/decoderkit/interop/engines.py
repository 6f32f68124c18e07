"""The engines ``translate`` and ``eval`` can run: our own, or an export in its engine.

``open_export(engine, directory)`` loads a directory written by ``decoderkit export`` for
CTranslate2 or ONNX Runtime; the result has ``config``, ``src_tokenizer``, ``tgt_tokenizer``
and ``translate_lines(lines, options, batch_size)``, like a checkpoint through
``decoderkit.generation.seq2seq.translate.translate_lines``.
"""

from __future__ import annotations

from pathlib import Path

from decoderkit.base.errors import UsageError
from decoderkit.interop.checkpoints import identify
from decoderkit.interop.seq2seq.ctranslate2 import Ctranslate2Engine
from decoderkit.interop.onnx.runtime import OnnxExport, load_onnx

ENGINES = ("decoderkit", "ctranslate2", "onnxruntime")  # decoderkit: a checkpoint, in PyTorch
EXPORTS = ("ctranslate2", "onnx", "transformers", "marian")  # decoderkit export --to; onnx
# runs on onnxruntime; transformers is a Hugging Face Marian directory, marian Marian's own
# model.npz directory (each a --checkpoint itself)


def open_export(engine: str, directory: str | Path, int8: bool = False,
                threads: int = 0, workers: int = 1) -> Ctranslate2Engine | OnnxExport:
    """The export in ``directory`` loaded in ``engine``; ``int8``: CTranslate2 computes in int8
    whatever the stored weight type (ONNX Runtime: not offered); ``workers``: CTranslate2's
    batches translated at once (ONNX Runtime: 1)."""
    check_export(engine, directory)
    if engine == "ctranslate2":
        return Ctranslate2Engine(directory, int8=int8, threads=threads, workers=workers)
    if workers != 1:
        raise UsageError(f"--workers {workers} is offered with --engine decoderkit or "
                         f"ctranslate2, not {engine}: give --workers 1")
    if engine == "onnxruntime":
        if int8:
            raise UsageError("--int8 is not offered with --engine onnxruntime (float32 graphs); "
                             "use --engine ctranslate2 or decoderkit")
        return load_onnx(directory, threads)
    raise UsageError(f"engine must be one of {ENGINES[1:]} for an export, got {engine!r}")


def check_export(engine: str, directory: str | Path, flag: str = "--model") -> None:
    """Refuse a ``directory`` that holds a model other than an export for ``engine`` (a
    checkpoint, another engine's export, a language model's), naming what it is and the
    command that takes it; one holding no model is left to the manifest's checks."""
    found = identify(directory)
    if found is None or found.engine == engine:
        return
    fits = f"use `{found.use} {directory}`" if found.use else \
        found.instead or "decoderkit runs no such model"
    raise UsageError(f"{flag} {directory} is {found}, not an export for --engine {engine}; "
                     f"{fits}")
