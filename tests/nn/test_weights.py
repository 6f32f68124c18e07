"""nn.weights: the rules every weights file passes, on hand-made files and name maps."""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import pytest
import torch
from safetensors.torch import save_file
from torch import nn

from decoderkit.base.errors import UsageError
from decoderkit.nn.weights import (
    NameMap,
    Source,
    check_claim,
    identity_map,
    load_file,
    load_weights,
    read_tensors,
    stored_dtype,
    stored_numbers,
)


@dataclass(frozen=True)
class Claim:
    """A config claiming ``numbers`` parameters (``approximate_parameters``)."""

    numbers: int

    def approximate_parameters(self) -> int:
        return self.numbers


class Tied(nn.Module):
    """An embedding and a head sharing one weight, and a packed projection."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(5, 4)
        self.head = nn.Linear(4, 5, bias=False)
        self.head.weight = self.embed.weight
        self.proj = nn.Linear(4, 6)


def test_every_reader_gives_the_same_tensors(tmp_path):
    tensors = {"a": torch.randn(2, 3), "b": torch.arange(4.0)}
    save_file(tensors, tmp_path / "w.safetensors")
    torch.save(tensors, tmp_path / "w.bin")
    np.savez(tmp_path / "w.npz", **{k: v.numpy() for k, v in tensors.items()})
    for name in ("w.safetensors", "w.bin", "w.npz"):
        got = read_tensors(tmp_path / name, None)
        assert set(got) == {"a", "b"} and all(torch.equal(got[k], tensors[k]) for k in got)


def test_unreadable_huge_or_blocking_files_are_one_line(tmp_path):
    (tmp_path / "w.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{}")
    with pytest.raises(UsageError, match="w.safetensors: truncated or not a safetensors file"):
        read_tensors(tmp_path / "w.safetensors", None)
    with pytest.raises(UsageError, match="w.safetensors is 10 bytes, more than the 5"):
        read_tensors(tmp_path / "w.safetensors", 5)
    os.mkfifo(tmp_path / "w.npz")
    with pytest.raises(UsageError, match="w.npz is a named pipe, not a regular file"):
        read_tensors(tmp_path / "w.npz", None)
    torch.save([1, 2], tmp_path / "w.bin")
    with pytest.raises(UsageError, match="w.bin: not a state dict but a list"):
        read_tensors(tmp_path / "w.bin", None)


def test_npz_text_arrays_are_kept_and_refused_only_where_used(tmp_path):
    np.savez(tmp_path / "m.npz", w=np.ones((6, 4), np.float32), **{"special:model.yml":
                                                                   np.array(["dim: 4"])})
    tensors = read_tensors(tmp_path / "m.npz", None)
    model = nn.Linear(4, 6, bias=False)
    names = NameMap({"weight": Source(("w",))}, ignored=frozenset({"special:model.yml"}))
    load_weights(model, tmp_path / "m.npz", tensors, names, "model.yml")
    assert torch.equal(model.weight, torch.ones(6, 4))
    names = NameMap({"weight": Source(("special:model.yml",))}, ignored=frozenset({"w"}))
    with pytest.raises(UsageError, match="tensor 'special:model.yml' is a ndarray, not a tensor"):
        load_weights(model, tmp_path / "m.npz", tensors, names, "model.yml")


def test_concatenated_transposed_and_tied_parts_load_exactly(tmp_path):
    model = Tied()
    q, k, v = (torch.randn(4, 2, dtype=torch.float64) for _ in range(3))  # (in, out) each
    emb, bias = torch.randn(5, 4), torch.randn(1, 6)
    names = NameMap({"embed.weight": Source(("emb",)),
                     "proj.weight": Source(("q", "k", "v"), transposed=True),
                     "proj.bias": Source(("b",), leading_one=True)},
                    strip=("model.",), ignored_suffixes=(".mask",))
    tensors = {"model.emb": emb, "q": q.t().contiguous(), "k": k.t().contiguous(),
               "v": v.t().contiguous(), "model.b": bias, "h.mask": torch.ones(2, dtype=bool)}
    with pytest.raises(UsageError, match=r"tensor 'q' has shape \(2, 4\), but cfg gives a model "
                                         r"expecting \(4, 2\)"):
        load_weights(model, tmp_path / "f", tensors, names, "cfg")
    tensors |= {"q": q, "k": k, "v": v}
    load_weights(model, tmp_path / "f", tensors, names, "cfg")
    assert torch.equal(model.proj.weight, torch.cat([q, k, v], dim=1).t().float())
    assert torch.equal(model.head.weight, emb) and torch.equal(model.proj.bias, bias[0])
    assert stored_dtype(tensors, names) == torch.float32
    assert stored_dtype({"a": q, "mask": torch.ones(1, dtype=bool)}, names) == torch.float64


def test_missing_extra_and_defaulted_tensors(tmp_path):
    model = nn.Linear(3, 2)
    names = NameMap({"weight": Source(("w",)), "bias": Source(("b",), default=0.5)},
                    strip=("transformer.",))
    load_weights(model, tmp_path / "f", {"w": torch.ones(2, 3)}, names, "cfg")
    assert torch.equal(model.bias, torch.full((2,), 0.5))
    with pytest.raises(UsageError, match="f: tensor 'w' \\(or with 'transformer.' before it\\) "
                                         "of the model cfg describes is missing"):
        load_weights(model, tmp_path / "f", {}, names, "cfg")
    with pytest.raises(UsageError, match=r"tensor 'x' \(and 1 more\) does not belong to the "
                                         "model cfg describes"):
        load_weights(model, tmp_path / "f", {"w": torch.ones(2, 3), "x": torch.ones(1),
                                             "y": torch.ones(1)}, names, "cfg")


def test_our_own_checkpoints_tied_weights_are_stored_once_under_either_name(tmp_path):
    source = Tied()
    for kept in ("embed.weight", "head.weight"):
        save_file({kept: source.embed.weight.detach(), "proj.weight": source.proj.weight.detach(),
                   "proj.bias": source.proj.bias.detach()}, tmp_path / "w.safetensors")
        model = load_file(Claim(44), lambda _: Tied(), tmp_path / "w.safetensors",
                          identity_map, "config.json")
        assert torch.equal(model.head.weight, source.embed.weight)
        assert model.head.weight.data_ptr() == model.embed.weight.data_ptr()


def test_the_claim_is_checked_against_the_file_before_any_model_is_built(tmp_path):
    tensors = {"a": torch.randn(2, 3), "b": torch.arange(4.0, dtype=torch.float64)}
    save_file(tensors, tmp_path / "w.safetensors")
    torch.save(tensors, tmp_path / "w.bin")
    np.savez(tmp_path / "w.npz", **{k: v.numpy() for k, v in tensors.items()})
    assert stored_numbers(tmp_path / "w.safetensors") == 10  # the header's shapes
    assert stored_numbers(tmp_path / "w.npz") >= 10  # bounded by the members' sizes
    assert stored_numbers(tmp_path / "w.bin") == (tmp_path / "w.bin").stat().st_size
    assert stored_numbers(tmp_path / "w.bin", tensors) == 10
    check_claim(tmp_path / "w.safetensors", 20, "cfg")  # CLAIM_SLACK: 2 x what it holds
    with pytest.raises(UsageError, match="w.safetensors holds at most 10 numbers, but cfg "
                                         "describes a model of at least 21 parameters"):
        check_claim(tmp_path / "w.safetensors", 21, "cfg")

    def never(config):
        raise AssertionError("a model was built")

    big = Claim(40 * 12 * 4096 * 4096)  # 40 layers of width 4096: 8 billion numbers
    for name in ("w.safetensors", "w.npz", "w.bin"):
        with pytest.raises(UsageError) as caught:
            load_file(big, never, tmp_path / name, identity_map, "config.json")
        assert str(caught.value) == (f"{tmp_path / name} holds at most "
                                     f"{stored_numbers(tmp_path / name):,} numbers, but "
                                     "config.json describes a model of at least 8,053,063,680 "
                                     "parameters (a damaged or edited config, or the weights of "
                                     "another model?)")
    os.mkfifo(tmp_path / "p.safetensors")
    with pytest.raises(UsageError, match="p.safetensors is a named pipe, not a regular file"):
        load_file(big, never, tmp_path / "p.safetensors", identity_map, "config.json")


@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.float8_e5m2])
def test_a_float8_tensor_is_one_line_naming_it(tmp_path, dtype):
    """A float8 weight in model.safetensors (main: NotImplementedError: "isfinite" not
    implemented for 'Float8_e4m3fn'), read through the stored reader as every directory is."""
    model = nn.Linear(3, 2)
    save_file({"weight": torch.ones(2, 3).to(dtype), "bias": torch.zeros(2)},
              tmp_path / "model.safetensors")
    tensors = read_tensors(tmp_path / "model.safetensors", None)
    with pytest.raises(UsageError, match=f"model.safetensors: tensor 'weight' is {dtype}, "
                                         "not one of") as caught:
        load_weights(model, tmp_path / "model.safetensors", tensors, identity_map(model), "c")
    assert "\n" not in str(caught.value)
