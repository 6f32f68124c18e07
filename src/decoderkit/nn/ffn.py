"""The position-wise feed-forward networks of a Transformer block (plain and gated) and their
activations; ``nn.layers.BlockSpec.feed_forward`` builds a block's.

Legend: B batch, T positions, d = d_model, f = d_ff.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from decoderkit.base.checks import check_choice

FFNS = ("mlp", "gated")


def gelu_tanh(x: Tensor) -> Tensor:
    """GELU, tanh form: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (GPT-1, GPT-2; HF's
    ``gelu_new``). Differs from the exact erf form by up to about 4e-4 in absolute value."""
    return F.gelu(x, approximate="tanh")


# FFN activations by name: max(0, x); x Phi(x) (exact, erf); its tanh form; swish x sigmoid(x)
ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu, "gelu_tanh": gelu_tanh, "swish": F.silu}


class PositionwiseFeedForward(nn.Module):
    """FFN(x) = act(x W1 + b1) W2 + b2, the same weights at every position.

    x (B, T, d) -> (B, T, d). Parameters: 2 d f + f + d. Dropout after the activation.
    """

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0,
                 activation: str = "relu", bias: bool = True):
        super().__init__()
        check_choice("activation", activation, ACTIVATIONS)
        self.w_1 = nn.Linear(d_model, d_ff, bias=bias)
        self.w_2 = nn.Linear(d_ff, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)
        self.activation = ACTIVATIONS[activation]

    def forward(self, x: Tensor) -> Tensor:
        """x (B, T, d) -> (B, T, d), each position independently."""
        return self.w_2(self.dropout(self.activation(self.w_1(x))))


class GatedFeedForward(PositionwiseFeedForward):
    """FFN(x) = (act(x W1) * x W3) W2 (Shazeer 2020; SwiGLU with activation swish: Llama's
    gate, up and down projections are W1, W3, W2). x (B, T, d) -> (B, T, d).
    Parameters: 3 d f (+ 2 f + d biased). Dropout after the product."""

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0,
                 activation: str = "swish", bias: bool = True):
        super().__init__(d_model, d_ff, dropout, activation, bias)
        self.w_3 = nn.Linear(d_model, d_ff, bias=bias)

    def forward(self, x: Tensor) -> Tensor:
        """x (B, T, d) -> (B, T, d), each position independently."""
        return self.w_2(self.dropout(self.activation(self.w_1(x)) * self.w_3(x)))
