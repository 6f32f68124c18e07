"""The 0.2 import path of the LM opener, now ``decoderkit.interop.checkpoints`` (one opener
for both families), kept so code written against it runs: this name is that module itself
(not a copy): ``from decoderkit.interop.pretrained import load_pretrained`` still works."""

import sys

from decoderkit.interop import checkpoints as _moved

sys.modules[__name__] = _moved
