"""interop.huggingface: a Hugging Face directory's weights as transformers writes them, one
file or sharded, float32, bfloat16 or float16, on GPT-2-shaped tiny random models (nothing
downloaded), through the one opener and the one weights pipeline."""

from __future__ import annotations

import json
import weakref

import pytest
import torch

from decoderkit.base.errors import UsageError
from decoderkit.interop.checkpoints import load_checkpoint
from decoderkit.interop.huggingface import INDEX, weights_file
from decoderkit.nn.stored import StoredTensors

transformers = pytest.importorskip("transformers")
IDS = torch.tensor([[5, 17, 3, 42, 8, 8, 60, 1, 29]])


def gpt2(dtype=torch.float32, **overrides):
    """A tiny GPT2LMHeadModel in eval mode, every parameter random (seed 0), in ``dtype``."""
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=61, n_positions=32, n_embd=16, n_layer=2,
                                     n_head=4, **overrides)
    model = transformers.GPT2LMHeadModel(config)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(0.3 * torch.randn(p.shape))
    return model.to(dtype).eval()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shard", [None, "4KB"])
def test_one_file_or_shards_in_any_dtype_load_to_float32_logits_of_transformers(
        tmp_path, dtype, shard):
    hf = gpt2(dtype, tie_word_embeddings=False)
    hf.save_pretrained(tmp_path, **({"max_shard_size": shard} if shard else {}))
    assert (weights_file(tmp_path).name == INDEX) == (shard is not None)
    if shard:
        assert len(set(json.loads((tmp_path / INDEX).read_text())["weight_map"].values())) > 2
    model = load_checkpoint(tmp_path).model
    assert model.embed.lut.weight.dtype == torch.float32
    with torch.no_grad():  # the same rounded weights computed in float32 by both
        want = hf.float()(IDS).logits
        assert float((model(IDS) - want).abs().max()) <= 1e-4


def test_a_shard_named_outside_the_directory_is_refused_before_anything_is_read(tmp_path):
    gpt2().save_pretrained(tmp_path, max_shard_size="4KB")
    index = json.loads((tmp_path / INDEX).read_text())
    name = next(iter(index["weight_map"]))
    index["weight_map"][name] = "../" + index["weight_map"][name]
    (tmp_path / INDEX).write_text(json.dumps(index))
    with pytest.raises(UsageError, match=f"{INDEX}: tensor '{name}' names the shard '../"):
        load_checkpoint(tmp_path)


def test_loading_holds_one_file_tensor_at_a_time(tmp_path, monkeypatch):
    """Each tensor comes from the memory-mapped file when it is looked up, whole or a block of
    its rows at a time (``blocks``), and is gone before the next is read: the loader never
    holds a second copy of the model."""
    gpt2(tie_word_embeddings=False).save_pretrained(tmp_path, max_shard_size="4KB")
    read, alive, names = [], [], []
    get, blocks = StoredTensors.__getitem__, StoredTensors.blocks

    def held(value, name):
        alive.append(sum(ref() is not None for ref in read))  # earlier tensors still held
        read.append(weakref.ref(value))
        names.append(name)
        return value

    def tracked(self, name):
        return held(get(self, name), name)

    def tracked_blocks(self, name):
        for block in blocks(self, name):
            yield held(block, name)

    monkeypatch.setattr(StoredTensors, "__getitem__", tracked)
    monkeypatch.setattr(StoredTensors, "blocks", tracked_blocks)
    model = load_checkpoint(tmp_path).model
    assert len(set(names)) == len(model.state_dict())  # each read (an untied head)
    assert len(names) == len(set(names))  # at this size one block each
    assert max(alive) == 0
