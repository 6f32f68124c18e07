"""nn.stored: safetensors read a tensor at a time, and a sharded index checked before any
tensor is read."""

from __future__ import annotations

import json
import os
import shutil

import pytest
import torch
from safetensors.torch import save_file

from decoderkit.base.errors import UsageError
from decoderkit.nn import stored
from decoderkit.nn.stored import StoredTensors, open_stored

TENSORS = {"a": torch.randn(2, 3), "b": torch.arange(4.0).to(torch.bfloat16),
           "c": torch.ones(5, dtype=torch.float16)}
INDEX = "model.safetensors.index.json"


def sharded(directory, weight_map=None):
    """``TENSORS`` in two shards and their index (``weight_map`` replaces the index's)."""
    save_file({"a": TENSORS["a"]}, directory / "one.safetensors")
    save_file({"b": TENSORS["b"], "c": TENSORS["c"]}, directory / "two.safetensors")
    weight_map = weight_map or {"a": "one.safetensors", "b": "two.safetensors",
                                "c": "two.safetensors"}
    (directory / INDEX).write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return directory / INDEX


def test_one_file_and_shards_give_the_same_tensors_read_when_asked(tmp_path, monkeypatch):
    save_file(TENSORS, tmp_path / "model.safetensors")
    for file in (tmp_path / "model.safetensors", sharded(tmp_path)):
        got = open_stored(file, None)
        assert isinstance(got, StoredTensors) and set(got) == set(TENSORS)
        assert got.numbers() == 15 and got.dtype("b") == torch.bfloat16
        assert all(torch.equal(got[k], v) and got[k].dtype == v.dtype
                   for k, v in TENSORS.items())
    reads = []
    monkeypatch.setattr(stored, "safe_open", lambda *a, **k: reads.append(a) or 1 / 0)
    got = StoredTensors({"a": tmp_path / "one.safetensors"}, {"a": ("F32", (2, 3))})
    assert got.numbers() == 6 and not reads  # the header alone: nothing read yet
    with pytest.raises(UsageError, match="one.safetensors: cannot read tensor 'a'"):
        got["a"]


@pytest.mark.parametrize("weight_map, needle", [
    ({"a": "../one.safetensors"}, "tensor 'a' names the shard '../one.safetensors', which is "
                                  "not a file name in the index's own directory"),
    ({"a": "/etc/passwd"}, "names the shard '/etc/passwd', which is not a file name"),
    ({"a": ".."}, "names the shard '..', which is not"),
    ({"a": 3}, "names the shard 3, which is not"),
    ({"a": "one.safetensors", "b": "three.safetensors", "c": "two.safetensors"},
     "shard .*three.safetensors does not exist"),
    ({"a": "one.safetensors", "b": "one.safetensors", "c": "two.safetensors"},
     "tensor 'b' is in two.safetensors, but the index names shard 'one.safetensors' for it"),
    ({"a": "one.safetensors", "c": "two.safetensors"},
     "tensor 'b' is in two.safetensors, but the index names no shard for it"),
    ({"a": "one.safetensors", "b": "two.safetensors", "c": "two.safetensors",
      "d": "two.safetensors"}, "tensor 'd' is not in two.safetensors, the shard the index"),
])
def test_a_bad_index_is_refused_naming_it_before_any_tensor_is_read(tmp_path, monkeypatch,
                                                                    weight_map, needle):
    index = sharded(tmp_path, weight_map)
    monkeypatch.setattr(StoredTensors, "__getitem__", lambda *a: 1 / 0)  # never reached
    with pytest.raises(UsageError, match=needle) as caught:
        open_stored(index, None)
    assert str(caught.value).startswith(str(index))


def test_shards_must_be_regular_bounded_files_and_the_index_an_index(tmp_path):
    index = sharded(tmp_path)
    with pytest.raises(UsageError, match="its shards hold more than the 200 bytes"):
        open_stored(index, 200)  # each shard under 200 bytes, both together over
    (tmp_path / "two.safetensors").unlink()
    os.mkfifo(tmp_path / "two.safetensors")
    with pytest.raises(UsageError, match="shard .*two.safetensors is a named pipe, not a "
                                         "regular file"):
        open_stored(index, None)
    (tmp_path / "two.safetensors").unlink()
    (tmp_path / "two.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{}")
    with pytest.raises(UsageError, match="two.safetensors: truncated or not a safetensors"):
        open_stored(index, None)
    for text in ("[]", '{"weight_map": {}}', "{"):
        index.write_text(text)
        with pytest.raises(UsageError, match=str(index)):
            open_stored(index, None)


def test_a_linked_shard_is_followed_as_in_a_hugging_face_cache_snapshot(tmp_path):
    """REPO/snapshots/REV/FILE -> ../../blobs/FILE is followed; a shard linked anywhere else
    is refused (base.model_files)."""
    blobs, snapshot = tmp_path / "blobs", tmp_path / "snapshots" / "0123abcd"
    blobs.mkdir()
    snapshot.mkdir(parents=True)
    sharded(blobs)
    for name in ("one.safetensors", "two.safetensors", INDEX):
        (snapshot / name).symlink_to(f"../../blobs/{name}")
    got = open_stored(snapshot / INDEX, None)
    assert torch.equal(got["a"], TENSORS["a"])
    (snapshot / "two.safetensors").unlink()
    (snapshot / "two.safetensors").symlink_to(blobs / "two.safetensors")
    (snapshot / "one.safetensors").unlink()
    (snapshot / "one.safetensors").symlink_to(shutil.copy(blobs / "one.safetensors", tmp_path))
    with pytest.raises(UsageError, match="one.safetensors is a link to .*outside the model"):
        open_stored(snapshot / INDEX, None)


@pytest.mark.parametrize("shard, needle", [
    ("one\x00.safetensors", r"names the shard 'one\\x00.safetensors', which is not a file name"),
    ("x" * 300 + ".safetensors", "cannot be read \\(File name too long\\)"),
    ("sub/one.safetensors", "names the shard 'sub/one.safetensors', which is not"),
    ("dangling.safetensors", "shard .*dangling.safetensors is a dangling symlink"),
    ("loop.safetensors", "shard .*loop.safetensors cannot be read \\(Too many levels"),
    ("folder.safetensors", "shard .*folder.safetensors is a directory, not a regular file"),
])
def test_odd_shard_names_are_one_line(tmp_path, shard, needle):
    """A NUL byte (main: ValueError: embedded null byte), a name past the OS's limit, a path,
    a dangling link, a link loop and a directory: each one line naming the index."""
    (tmp_path / "dangling.safetensors").symlink_to(tmp_path / "gone")
    (tmp_path / "loop.safetensors").symlink_to(tmp_path / "loop.safetensors")
    (tmp_path / "folder.safetensors").mkdir()
    index = sharded(tmp_path, {"a": shard, "b": "two.safetensors", "c": "two.safetensors"})
    with pytest.raises(UsageError, match=needle) as caught:
        open_stored(index, None)
    assert str(caught.value).startswith(str(index)) and "\n" not in str(caught.value)
