"""``decoderkit grade``: check a learner's own Transformer code against the library.

The learner's file runs in a limited child process (``sandbox``, ``child``); its outputs
are judged against decoderkit's reference and diagnosed against a catalogue of named
mistakes (``catalogue``, ``blocks``, ``pieces``), item by item (``seed00N`` modules):
files and notebooks (``notebook``) through ``decoderkit grade``, and from inside a notebook
``grade(obj)`` (``inplace``).
"""

from decoderkit.grade.inplace import grade

__all__ = ["grade"]
