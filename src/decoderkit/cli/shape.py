"""Flags shared by several subcommands: the model shape (``train``, ``params``)."""

from __future__ import annotations

from decoderkit.cli.args import integer

MAX_POSITIONS = 65536  # --max-len: the longest sequence a model may be built for


def add_shape_flags(group, *, layers: int, d_model: int, heads: int, d_ff: int) -> None:
    """The model-shape flags shared by ``train`` and ``params`` (with their own defaults)."""
    group.add_argument("--layers", type=integer(1, 1000), default=layers,
                       help="N: encoder layers and decoder layers (each)")
    group.add_argument("--d-model", type=integer(2, 65536), default=d_model,
                       help="model width d (even, a multiple of --heads)")
    group.add_argument("--heads", type=integer(1, 4096), default=heads, help="attention heads h")
    group.add_argument("--d-ff", type=integer(1, 1 << 20), default=d_ff,
                       help="feed-forward width f")
    group.add_argument("--norm-first", action="store_true",
                       help="pre-norm x + F(LN(x)) instead of post-norm LN(x + F(x)); "
                       "pre-norm stacks end in a final norm")
