"""Every module that moved, at its old import path: ``MOVED`` is the one table of old path ->
new path, and ``install`` puts a finder on ``sys.meta_path`` that answers an old path with the
moved module itself (not a copy: its functions, classes and monkeypatches are the same
objects), with a ``DeprecationWarning`` naming the new path. A module path that stayed but
lost names, or an old path that is now a package (``decoderkit.interop.marian``), keeps
its old names through ``__getattr__ = forward(__name__)`` (``NAMES_MOVED``), each with the
same warning.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings

_D = "decoderkit."
# old import path -> where the module lives now (0.1's paths, the family layout of 0.2, and
# the family folders of every layer)
MOVED = {_D + old: _D + new for old, new in {
    "nn.model": "nn.seq2seq.model",
    "training.checkpoint": "training.seq2seq.checkpoint",
    "training.data": "training.seq2seq.data",
    "training.tasks": "training.seq2seq.tasks",
    "training.tokenizer": "text.seq2seq.tokenizer",
    "training.spm_tokenizer": "text.seq2seq.spm_tokenizer",
    "training.lm_checkpoint": "training.lm.checkpoint",
    "training.lm_data": "training.lm.data",
    "training.lm_objective": "training.lm.objective",
    "interop.pretrained": "interop.checkpoints",
    "generation.decoding": "generation.seq2seq.decoding",
    "generation.step": "generation.seq2seq.step",
    "generation.search": "generation.seq2seq.search",
    "generation.selection": "generation.seq2seq.selection",
    "generation.translate": "generation.seq2seq.translate",
    "generation.compiled": "generation.seq2seq.compiled",
    "generation.workers": "generation.seq2seq.workers",
    "generation.lm_row": "generation.lm.row",
    "generation.lm_rows": "generation.lm.rows",
    "generation.lm_choose": "generation.lm.choose",
    "generation.stops": "generation.lm.stops",
    "generation.rowwise": "generation.lm.rowwise",
    "interop.marian_npz_options": "interop.marian.npz_options",
    "interop.marian_npz_export": "interop.marian.npz_export",
    "interop.marian_npz": "interop.marian.npz",
    "interop.marian_export": "interop.marian.hf_export",
    "interop.hf_gpt_classifier": "interop.gpt.classifier",
    "interop.hf_gpt": "interop.gpt.hf",
    "interop.nanogpt": "interop.gpt.nanogpt",
    "interop.ctranslate2_files": "interop.seq2seq.ctranslate2_files",
    "interop.onnx_runtime": "interop.onnx.runtime",
    "serve.app": "serve.seq2seq.app",
    "serve.engines": "serve.seq2seq.engines",
    "serve.schema": "serve.seq2seq.schema",
    "report.consistency_lm": "report.lm.consistency",
    "report.consistency": "report.seq2seq.consistency",
    "serve.batcher": "serve.seq2seq.batcher",
    "serve.limits": "serve.seq2seq.limits",
    "serve.lm.ct2": "serve.lm.engines",
    "cli.train": "cli.seq2seq.train",
    "cli.translate": "cli.seq2seq.translate",
    "cli.evaluate": "cli.seq2seq.evaluate",
    "cli.convert": "cli.seq2seq.convert",
    "cli.export": "cli.seq2seq.export",
    # nn by family, text out of training (issue 41)
    "nn.encoder_decoder": "nn.seq2seq.model",
    "nn.classifier": "nn.lm.classifier",
    "nn.lm_lora": "nn.lm.lora",
    "nn.lm_cache": "nn.cache",  # the one cache (its LMCache, RowsCache, CacheShape removed)
    "nn.rows_cache": "nn.cache",  # (RowsKVCache, PackedKV, PackedPrefill removed)
    "training.lm.tokenizer": "text.lm.tokenizer",
    "training.lm.chat": "text.lm.chat",
    "training.lm.sandbox": "text.lm.sandbox",
    "training.lm.bounds": "text.lm.bounds",
    "training.lm.template_process": "text.lm.template_process",
    "training.lm.conversation": "generation.lm.conversation",
    "training.seq2seq.tokenizer": "text.seq2seq.tokenizer",
    "training.seq2seq.spm_tokenizer": "text.seq2seq.spm_tokenizer",
    "interop.manifest": "interop.seq2seq.manifest",
    "report.figures": "report.seq2seq.figures",
    "report.figure_names": "report.seq2seq.figure_names",
    "report.seed_claims": "report.seq2seq.seed_claims",
    "report.attention_maps": "report.seq2seq.attention_maps",
    "cli.data": "cli.seq2seq.data",
    "interop.ctranslate2.translator": "interop.seq2seq.ctranslate2",
    "interop.ctranslate2.files": "interop.seq2seq.ctranslate2_files",
    "interop.ctranslate2.generator": "interop.lm.ctranslate2",
    # what runs inside a model's forward is nn's (tests/serve/lm/test_walk.py)
    "generation.packing": "nn.packing",
}.items()}
_BOUNDS = "default_max_len banned_ids restrict last_step row_limits check_length_penalty"
# a module path -> where the names it held before are now: one module for all (an old module
# whose path is now a package), or name -> module (names that moved out of a module that stayed;
# "module:NEW", a name renamed as it moved)
NAMES_MOVED: dict[str, str | dict[str, str]] = {
    _D + "generation.lm": _D + "generation.lm.complete",
    _D + "interop.marian": _D + "interop.marian.hf",
    _D + "interop.ctranslate2": _D + "interop.seq2seq.ctranslate2",
    _D + "interop.onnx": _D + "interop.onnx.export",
    _D + "generation.limits": dict.fromkeys(_BOUNDS.split(), _D + "generation.seq2seq.bounds"),
    _D + "nn.cache": dict.fromkeys(("CrossKV", "DecoderCache"), _D + "nn.cross_cache"),
    _D + "nn.layers": dict.fromkeys(("LayerNorm", "AnnotatedLayerNorm", "LAYER_NORMS",
                                     "make_norm"), _D + "nn.norms")
    | dict.fromkeys(("gelu_tanh", "ACTIVATIONS", "FFNS", "PositionwiseFeedForward",
                     "GatedFeedForward"), _D + "nn.ffn"),
    # the module nn/lm.py, now the package nn/lm/
    _D + "nn.lm": dict.fromkeys(("POSITIONS", "SIZES", "INIT_STD", "LMConfig", "ffn_width",
                                 "DecoderOnlyLM"), _D + "nn.lm.model")
    | dict.fromkeys(("PRESETS", "lm_preset"), _D + "nn.lm.presets"),
    _D + "nn.lm.model": dict.fromkeys(("PRESETS", "lm_preset"), _D + "nn.lm.presets"),
    _D + "text.lm.tokenizer": {"TextStream": _D + "generation.lm.stops"},
    _D + "generation.lm.rowwise": dict.fromkeys((
        "RowwiseLinear", "RowInvariant", "ACTIVATION_WIDTH", "rowwise_available"),
        _D + "nn.rowwise"),
    _D + "generation.int8": {"SplitCrossAttention": _D + "generation.seq2seq.int8"},
    _D + "training.objective": {"TeacherForced": _D + "training.seq2seq.objective"},
    _D + "interop.checkpoints": {"TRANSLATION": _D + "base.families:SEQ2SEQ"},
    _D + "interop.llama.hf_export": dict.fromkeys(("is_llama_shaped", "FIXED"),
                                                  _D + "interop.lm.architectures"),
    _D + "interop.gguf.writer": {"TYPES": _D + "interop.lm.architectures:GGUF_TYPES"},
    _D + "interop.gguf.gpt2": {"ARCH": _D + "interop.lm.architectures:GPT2"},
    _D + "nn.attention": {"KVCache": _D + "nn.cache", **dict.fromkeys((
        "attend_heads", "attend_shared", "fused_pays", "FUSED_MIN_QUERIES"), _D + "nn.attend")},
}


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Answers an old path of ``MOVED``: the import system then finds the moved module in
    ``sys.modules`` under the old name (as a module that replaces itself there)."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec):
        return None  # a placeholder module, replaced in exec_module

    def exec_module(self, module) -> None:
        old, new = module.__name__, MOVED[module.__name__]
        warnings.warn(f"{old} moved to {new}: import it from there", DeprecationWarning,
                      stacklevel=_caller())
        sys.modules[old] = importlib.import_module(new)


def install() -> None:
    """Put the finder on ``sys.meta_path`` once, after the path finders (a real module wins)."""
    if not any(isinstance(finder, _Finder) for finder in sys.meta_path):
        sys.meta_path.append(_Finder())


def forward(module: str):
    """A module ``__getattr__`` giving the names ``module`` held before (``NAMES_MOVED``)."""
    moved = NAMES_MOVED[module]

    def __getattr__(name: str):
        target = moved if isinstance(moved, str) else moved.get(name)
        if target is not None and not name.startswith("__"):
            home, _, new = target.partition(":")
            found = getattr(importlib.import_module(home), new or name, _MISSING)
            if found is not _MISSING:
                warnings.warn(f"{module}.{name} moved to {home}.{new or name}: import it from "
                              f"there", DeprecationWarning, stacklevel=2)
                return found
        raise AttributeError(f"module {module!r} has no attribute {name!r}")
    return __getattr__


def _caller() -> int:
    """The ``stacklevel`` of the first frame outside the import system: the import statement
    that named an old path (so the warning points at the user's line)."""
    frame, level = sys._getframe(1), 1
    while frame is not None and (frame.f_code.co_filename.startswith("<frozen importlib")
                                 or frame.f_code.co_filename == __file__):
        frame, level = frame.f_back, level + 1
    return level


_MISSING = object()
