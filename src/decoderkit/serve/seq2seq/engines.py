"""What a server decodes with: a checkpoint in PyTorch (float32 or int8) or an export in
CTranslate2 or ONNX Runtime, as one ``Served``: the call the batcher makes, the tokenizers
the request checks read, and the request features the engine cannot give.

Every engine goes through the same ``Batcher`` and API; a request asking for a feature its
engine lacks (``explain`` on CTranslate2, say) is refused with a 422 naming the engine,
before it is queued, and ``/v1/model`` lists what is unavailable.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

import torch

from decoderkit.generation.limits import logits_dtype
from decoderkit.base.families import SEQ2SEQ
from decoderkit.generation.engines import check_engine, unavailable
from decoderkit.generation.seq2seq.settings import checkpoint_source, settled_options
from decoderkit.generation.seq2seq.translate import (
    DecodeOptions,
    Translation,
    asked,
    translate_lines,
)
from decoderkit.generation.settings import REQUEST, Source
from decoderkit.nn.seq2seq.model import EncoderDecoder, ModelConfig
from decoderkit.report.params import count_parameters
from decoderkit.serve.fields import FieldError
from decoderkit.text.seq2seq.tokenizer import Tokenizer

Translate = Callable[[list[str], DecodeOptions, int], list[Translation]]

REQUEST_OPTIONS = ("sampling", "explain", "n_best")  # the options a request may ask for of
# those an engine may lack (generation.engines)


@dataclass(frozen=True)
class Served:
    """A model ready to serve, whatever runs it."""

    engine: str  # as --engine names it, with " int8" when computing in int8
    config: ModelConfig
    src_tokenizer: Tokenizer
    tgt_tokenizer: Tokenizer
    translate: Translate  # (lines, options, batch size) -> one Translation per line
    parameters: int  # of the float32 model the weights came from
    step: int | None  # the checkpoint's training step (exports: the one exported, if said)
    unavailable: dict[str, str] = field(default_factory=dict)  # request field -> why not
    dtype: torch.dtype = torch.float32  # of its log-probabilities: bounds sampling's numbers
    meta: dict = field(default_factory=dict)  # the checkpoint's (or export's): its own
    # decoding settings (``generation.seq2seq.settings``)

    def options(self, request: dict) -> DecodeOptions:
        """The options a request decodes with: what it says (setting -> value), else the
        checkpoint's own settings, else the defaults (``settled_options``: as ``translate``
        with no flags)."""
        return settled_options([Source(REQUEST, request)], self.meta)[0]

    def check(self, options: DecodeOptions) -> None:
        """Refuse (``FieldError`` naming the field and the engine) a feature this engine
        cannot give (``generation.engines.check_engine``)."""
        check_engine(SEQ2SEQ, self.engine, asked(options), FieldError)


def from_checkpoint(ckpt, int8: bool = False) -> Served:
    """A loaded ``Checkpoint`` in PyTorch; ``int8``: a quantized copy, made once here."""
    parameters = count_parameters(ckpt.model)
    if int8:  # imported here: quantization's machinery is not needed otherwise
        from decoderkit.generation.seq2seq.int8 import quantize_int8

        ckpt = replace(ckpt, model=quantize_int8(ckpt.model))
    checkpoint_source(ckpt.meta)  # its settings checked before serving

    def translate(lines, options, batch):
        return translate_lines(ckpt, lines, options, batch)

    return Served("decoderkit int8" if int8 else "decoderkit", ckpt.config, ckpt.src_tokenizer,
                  ckpt.tgt_tokenizer, translate, parameters, ckpt.step,
                  dtype=logits_dtype(ckpt.model), meta=ckpt.meta)


def from_export(engine: str, export, int8: bool = False) -> Served:
    """An export loaded by ``interop.engines.open_export(engine, ..., int8)``."""
    with torch.device("meta"):  # shapes only: the count without the memory
        parameters = count_parameters(EncoderDecoder(export.config))
    checkpoint_source(export.meta)  # an exported Marian directory's settings, checked
    lacks = {k: v for k, v in unavailable(SEQ2SEQ, engine).items() if k in REQUEST_OPTIONS}
    return Served(f"{engine} int8" if int8 else engine, export.config, export.src_tokenizer,
                  export.tgt_tokenizer, export.translate_lines, parameters,
                  export.manifest.get("step"), lacks, meta=export.meta)
