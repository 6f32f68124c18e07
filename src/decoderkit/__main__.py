"""``python -m decoderkit``: the same as the ``decoderkit`` command (and ``torchrun -m``)."""

import sys

from .cli import main

sys.exit(main())
