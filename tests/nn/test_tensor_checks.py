"""nn.tensor_checks.copy_blocks: a stored tensor's parts copied into their rows a block at a
time give what torch.cat of the whole parts gives (cast to the model's dtype), and a NaN in any
block is counted over the whole tensor and refused naming it."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import save_file

from decoderkit.base.errors import UsageError
from decoderkit.nn import stored
from decoderkit.nn.stored import open_stored
from decoderkit.nn.tensor_checks import copy_blocks


@pytest.fixture
def parts(tmp_path, monkeypatch):
    monkeypatch.setattr(stored, "BLOCK_BYTES", 3 * 8 * 2)  # three bf16 rows of 8 a block
    values = {"q": torch.randn(10, 8).bfloat16(), "k": torch.randn(4, 8).bfloat16(),
              "bad": torch.randn(10, 8).bfloat16()}
    values["bad"][[0, 9], 3] = float("nan")  # in the first and the last block
    save_file(values, tmp_path / "w.safetensors")
    return tmp_path / "w.safetensors", values


def test_blocks_fill_the_rows_as_cat_does(parts):
    file, values = parts
    tensors = open_stored(file, None)
    assert [len(b) for b in tensors.blocks("q")] == [3, 3, 3, 1]
    into = torch.empty(14, 8)
    copy_blocks(file, tensors, [("q", (10, 8)), ("k", (4, 8))], into, "the config")
    assert torch.equal(into, torch.cat([values["q"], values["k"]]).float())


def test_non_finite_values_are_counted_over_every_block(parts):
    file, _ = parts
    with pytest.raises(UsageError, match="tensor 'bad' holds 2 non-finite value"):
        copy_blocks(file, open_stored(file, None), [("bad", (10, 8))], torch.empty(10, 8), "c")
    with pytest.raises(UsageError, match="tensor 'q' has shape \\(10, 8\\), but c gives a "
                       "model expecting \\(9, 8\\)"):
        copy_blocks(file, open_stored(file, None), [("q", (9, 8))], torch.empty(9, 8), "c")
