"""The figures' names and defaults, importable without matplotlib (the command line's choices)."""

SEED_FIGURES = ("causal_attention", "positional_encoding", "relative_offset", "norm_axes",
                "label_smoothing", "warmup")  # the six seed figures, keys of figures.FIGURES
ATTENTION = "attention"  # a checkpoint's maps, written as attention_self and attention_cross
DEFAULT_TEXT = "29 Nov 2026"  # the attention maps' default source sentence
FORMATS = ("png", "svg")  # file formats written
