"""Reading a learner module's weights by classes and shapes: projections read from PyTorch's
own nn.MultiheadAttention (and from four nn.Linear) reproduce that module's output in the
reference arithmetic; a layout that is not the lesson's is a LayoutError naming what it found."""

import pytest
import torch
from torch import nn

from decoderkit.grade.judge import layout
from decoderkit.grade.reference import blocks
from decoderkit.grade.run.child.values import describe


def _result(module: nn.Module) -> dict:
    """What the child sends back for a module: its state dict and layout."""
    return {"state": dict(module.state_dict()), "layout": describe(module)}


def test_mha_projections_reproduce_nn_multihead_attention():
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(8, 2, batch_first=True).double().eval()
    r = _result(nn.ModuleDict({"att": mha}))
    (name,) = layout.modules_of(r, "MultiheadAttention")
    assert layout.attrs_of(r, name) == {"num_heads": 2, "batch_first": True}
    p = layout.mha_projections(r["state"], name, 2)
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    with torch.no_grad():
        expected = mha(x, x, x, need_weights=False)[0]
    torch.testing.assert_close(blocks.multi_head(x, x, None, p, blocks.Spec()), expected,
                               rtol=1e-12, atol=1e-12)


def test_four_linears_and_their_errors():
    torch.manual_seed(1)
    lins = nn.ModuleList(nn.Linear(4, 4) for _ in range(4))
    r = _result(lins)
    names = layout.modules_of(r, "Linear")
    assert names == ["0", "1", "2", "3"]
    p = layout.linear_projections(r["state"], names, 2)
    assert torch.equal(p.wv, lins[2].weight.double()) and torch.equal(p.bo, lins[3].bias.double())
    with pytest.raises(layout.LayoutError, match="expected four nn.Linear .* found 3"):
        layout.linear_projections(r["state"], names[:3], 2)
    with pytest.raises(layout.LayoutError, match="no 0.weight in the state dict"):
        layout.linear({}, "0")


def test_norm_pair_needs_exactly_a_scale_and_a_shift():
    norm = nn.LayerNorm(6)
    gamma, beta = layout.norm_pair(dict(norm.state_dict()), 6)
    assert torch.equal(gamma, norm.weight.double()) and torch.equal(beta, norm.bias.double())
    with pytest.raises(layout.LayoutError, match="scale and a shift of size 6 under "
                                                 "'\\(module\\)', found 1"):
        layout.norm_pair({"weight": torch.ones(6)}, 6)
