"""CTranslate2's old package: its modules are each family's now (the translator and its files:
``interop.seq2seq.ctranslate2``, ``interop.seq2seq.ctranslate2_files``; the LM's generator:
``interop.lm.ctranslate2``); the old paths import with a ``DeprecationWarning``
(``base.moved``), and the names this path held as a module are the translator's."""

from decoderkit.base.moved import forward

__getattr__ = forward(__name__)  # the names the module at this path held before
