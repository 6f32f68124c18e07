"""``decoderkit grade``: check a learner's own Transformer code against the library.

The learner's file runs in a limited child process (``sandbox``, ``child``); its outputs
are judged against decoderkit's reference and diagnosed against a catalogue of named
mistakes (``catalogue``, ``blocks``, ``pieces``), item by item (``seed00N`` modules).
"""
