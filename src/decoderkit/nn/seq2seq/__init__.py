"""The encoder-decoder Transformer: its config, the model and ``make_model`` (``model``), built
from the shared blocks of ``nn.layers``."""
