"""LoRA's layer against its formula in float64 NumPy: PEFT's initialisation (nn.Linear's
Kaiming-uniform A, zero B), the scale (alpha / r, rsLoRA alpha / sqrt(r)), row parts of a
packed linear, merge / unmerge, the frozen base, and the config's checks."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from decoderkit.base.errors import UsageError
from decoderkit.nn.lora import (
    LoRAConfig,
    LoRALinear,
    MultiLoRALinear,
    check_rank,
    lora_scale,
    routed,
    served_adapters,
    trainable,
)


def randomised(layer: LoRALinear, seed: int = 1) -> LoRALinear:
    """``layer`` with every B random (a trained adapter: B A no longer zero)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for b in layer.lora_B.values():
            b.copy_(torch.randn(b.shape, generator=g, dtype=b.dtype))
    return layer


def np_lora(x, w, b, parts, a, bb, s):
    """x W^T + b + s x A_p^T B_p^T on each part's rows, float64."""
    y = x @ w.T + b
    for name, (start, end) in parts.items():
        y[..., start:end] += s * (x @ a[name].T @ bb[name].T)
    return y


@pytest.mark.parametrize("parts", [{"all": (0, 12)}, {"q": (0, 4), "v": (8, 12)}])
def test_lora_linear_is_the_formula(parts):
    torch.manual_seed(0)
    base = nn.Linear(6, 12).double()
    layer = randomised(LoRALinear(base, parts, LoRAConfig(r=3, alpha=5.0)))
    x = torch.randn(2, 5, 6, dtype=torch.float64)
    a = {k: v.detach().numpy() for k, v in layer.lora_A.items()}
    bb = {k: v.detach().numpy() for k, v in layer.lora_B.items()}
    want = np_lora(x.numpy(), base.weight.detach().numpy(), base.bias.detach().numpy(), parts,
                   a, bb, 5.0 / 3)
    np.testing.assert_allclose(layer(x).detach().numpy(), want, rtol=1e-12, atol=1e-12)
    if len(parts) > 1:  # the rows of no part are the base's exactly
        np.testing.assert_array_equal(layer(x)[..., 4:8].detach().numpy(),
                                      base(x)[..., 4:8].detach().numpy())


def test_step_zero_is_the_base_exactly_and_a_is_nn_linears_init():
    """PEFT: A Kaiming-uniform with a = sqrt(5) (nn.Linear's own weight init), B zeros."""
    base = nn.Linear(16, 24)
    torch.manual_seed(7)
    layer = LoRALinear(base, {"all": (0, 24)}, LoRAConfig(r=4))
    torch.manual_seed(7)
    reference = nn.Linear(16, 4, bias=False)  # PEFT's lora_A is such a linear
    torch.testing.assert_close(layer.lora_A["all"], reference.weight, rtol=0, atol=0)
    assert not layer.lora_B["all"].any()
    x = torch.randn(3, 16)
    assert torch.equal(layer(x), base(x))
    bound = 1 / math.sqrt(16)  # the bound Kaiming-uniform with a = sqrt(5) gives
    assert layer.lora_A["all"].abs().max() <= bound


@pytest.mark.parametrize("rslora, want", [(False, 16 / 4), (True, 16 / 2)])
def test_scale_is_alpha_over_r_or_over_its_square_root(rslora, want):
    assert lora_scale(16, 4, rslora) == want
    assert LoRAConfig(r=4, alpha=16, rslora=rslora).scale == want


def test_merge_adds_s_b_a_once_and_unmerge_takes_it_out():
    torch.manual_seed(0)
    base = nn.Linear(6, 12, bias=False).double()
    w0 = base.weight.detach().clone()
    layer = randomised(LoRALinear(base, {"q": (0, 4), "v": (8, 12)}, LoRAConfig(r=2)))
    x = torch.randn(4, 6, dtype=torch.float64)
    unmerged = layer(x).detach()
    layer.merge()
    layer.merge()  # a second merge does nothing (PEFT's)
    want = w0.clone()
    for name, (start, end) in layer.parts.items():
        want[start:end] += 8.0 * layer.lora_B[name].detach() @ layer.lora_A[name].detach()
    torch.testing.assert_close(base.weight.detach(), want, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(layer(x).detach(), unmerged, rtol=1e-12, atol=1e-12)
    layer.unmerge()
    layer.unmerge()
    torch.testing.assert_close(base.weight.detach(), w0, rtol=1e-12, atol=1e-12)


def test_the_base_is_frozen_only_a_and_b_train():
    torch.manual_seed(0)
    layer = LoRALinear(nn.Linear(6, 12), {"all": (0, 12)}, LoRAConfig(r=2, dropout=0.5))
    params = trainable(layer)
    assert {id(p) for p in params} == {id(layer.lora_A["all"]), id(layer.lora_B["all"])}
    layer.train()
    layer(torch.randn(3, 6)).sum().backward()
    assert layer.base.weight.grad is None and layer.base.bias.grad is None
    assert layer.lora_B["all"].grad is not None
    optimizer = torch.optim.AdamW(params)
    optimizer.step()
    assert all(id(p) not in {id(q) for q in optimizer.state} for p in layer.base.parameters())


def test_dropout_touches_the_adapters_input_only():
    """Training with dropout 0.9 and B = 0: the output is still the base's (the base path is
    never dropped)."""
    layer = LoRALinear(nn.Linear(6, 12), {"all": (0, 12)}, LoRAConfig(r=2, dropout=0.9))
    layer.train()
    x = torch.randn(3, 6)
    assert torch.equal(layer(x), layer.base(x))


@pytest.mark.parametrize("field, value, says", [
    ("r", 0, r"r must be an integer in \[1, 16384\], got 0"), ("alpha", 0, "alpha must be"),
    ("dropout", 1.0, "dropout must be"), ("rslora", 1, "rslora must be a bool"),
    ("targets", "q_proj", "targets must be a non-empty list"),
    ("targets", ("all-linear", "q_proj"), "stands alone")])
def test_config_refuses_bad_fields_by_name(field, value, says):
    with pytest.raises(UsageError, match=says):
        LoRAConfig(**{field: value})


def test_rank_beyond_min_in_out_is_refused_naming_the_linear():
    with pytest.raises(UsageError, match=r"r must be in \[1, 4\] for k_proj \(16 -> 4"):
        check_rank(5, "k_proj", 16, 4)
    with pytest.raises(UsageError, match="for v"):
        LoRALinear(nn.Linear(6, 12), {"v": (8, 12)}, LoRAConfig(r=5))


def test_several_adapters_each_on_its_positions_and_the_base_elsewhere():
    """MultiLoRALinear inside ``routed``: each position is its own adapter's LoRALinear (the
    float64 formula, to rounding), a base position is the base's exactly, whatever adapters
    its companions use; outside ``routed``, the base alone."""
    torch.manual_seed(0)
    base = nn.Linear(6, 12).double()
    one = randomised(LoRALinear(base, {"q": (0, 4), "v": (8, 12)}, LoRAConfig(r=2)), 1)
    base_of_two = LoRALinear(base, {"all": (0, 12)}, LoRAConfig(r=3, alpha=5.0))
    two = randomised(base_of_two, 2)
    multi = MultiLoRALinear(base, {"one": one, "two": two})
    x = torch.randn(2, 5, 6, dtype=torch.float64)
    names = ["one", None, "two", "two", None, "one", "one", None, "two", None]
    with torch.no_grad(), routed(multi, names):
        y = multi(x).reshape(10, 12)
    flat = x.reshape(10, 6)
    for i, name in enumerate(names):
        with torch.no_grad():
            want = {"one": one, "two": two, None: base}[name](flat)[i]
        if name is None:  # (the same rows: plain nn.Linear's GEMM is not row-invariant)
            assert torch.equal(y[i], want)
        else:
            torch.testing.assert_close(y[i], want, rtol=1e-12, atol=1e-12)
            assert (y[i] - base(flat[i])).abs().max() > 1e-2  # the adapter moved it
    with torch.no_grad():
        assert torch.equal(multi(x), base(x)) and multi.route is None
    assert served_adapters(multi) == {"one", "two"}


def test_an_adapter_the_model_lacks_is_refused_naming_those_it_has():
    base = nn.Linear(4, 4)
    multi = MultiLoRALinear(base, {"a": LoRALinear(base, {"all": (0, 4)}, LoRAConfig(r=2))})
    with pytest.raises(UsageError, match=r"adapter 'b' is not one of this model's \(a\)"):
        with routed(multi, ["a", "b"]):
            pass
    with pytest.raises(UsageError, match=r"'a' is not one of this model's \(none\)"):
        with routed(base, ["a"]):
            pass
