"""The 0.1 import path of ``decoderkit.training.seq2seq.spm_tokenizer``, kept so code written
against it runs: this name is that module itself (not a copy), so its functions and
monkeypatches are the same objects."""

import sys

from decoderkit.training.seq2seq import spm_tokenizer as _moved

sys.modules[__name__] = _moved
