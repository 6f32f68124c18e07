"""What each engine cannot do: one table (family -> engine -> option -> why not) and one check,
which the library (``translate_lines``, the CTranslate2 engines), the command line and both
servers (a 4xx naming the request field; ``/v1/model`` lists the engine's) all call.

An option is named as its request field: ``sampling``, ``explain``, ``n_best`` of a
translation (``generation.seq2seq.translate.asked`` reads them off ``DecodeOptions``, with the
library's ``compile`` and ``int8``); ``seed``, ``presence_penalty``, ... of a completion
(``generation.lm.row.asked`` off ``Settings``, the server adds ``explore``). decoderkit's own
engine lacks none.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from decoderkit.base.errors import UsageError
from decoderkit.base.families import LM, SEQ2SEQ

UNAVAILABLE: dict[str, dict[str, dict[str, str]]] = {
    SEQ2SEQ: {
        "ctranslate2": {  # ctranslate2.Translator on an export
            "sampling": "its sampling has no top-p and no per-line seeds",
            "explain": "it returns no per-layer, per-head attention weights nor alternatives",
            "n_best": "its hypotheses are not returned by this engine",
            "compile": "it runs its own kernels, not a torch.compile'd step",
            "int8": "its int8 is chosen when it loads the export (--int8), not per call"},
        "onnxruntime": {  # the export's two graphs in ONNX Runtime sessions
            "explain": "its graphs return no attention weights",
            "compile": "it runs its own graphs, not a torch.compile'd step",
            "int8": "its graphs are float32"}},
    LM: {
        "ctranslate2": {  # ctranslate2.Generator on a conversion of an lm export
            "seed": "its random seed is process-wide, not per request",
            "presence_penalty": "it has a repetition penalty, not OpenAI's presence penalty",
            "frequency_penalty": "it has a repetition penalty, not OpenAI's frequency penalty",
            "logit_bias": "generate_tokens takes no logit bias",
            "logprobs": "generate_tokens gives no alternatives' log-probabilities",
            "explore": "the explorer reads PyTorch's attention and hidden states"}},
}


def unavailable(family: str, engine: str) -> dict[str, str]:
    """Option -> why, for what ``engine`` (as --engine names it, " int8" or not) of ``family``
    cannot give (empty: everything)."""
    return dict(UNAVAILABLE[family].get(engine.removesuffix(" int8"), {}))


def check_engine(family: str, engine: str, asked: Iterable[str],
                 refuse: Callable[[str, str], Exception] = lambda option, message:
                 UsageError(message)) -> None:
    """Raise ``refuse(option, message)`` (default a ``UsageError``) for the first option in
    ``asked`` that ``engine`` of ``family`` cannot give; the message names the option, the
    engine and why."""
    asked = set(asked)
    for option, why in unavailable(family, engine).items():
        if option in asked:
            raise refuse(option, f"{option} is not available with engine {engine}: {why}")
