"""A model directory's files are read where its own layout puts them: links inside it and
Hugging Face's cache layout (snapshots/REV/FILE -> ../../blobs/SHA) are followed; a link to
anywhere else is refused naming where it points, a dangling one is named as such."""

from __future__ import annotations

import os

import pytest

from decoderkit.base.errors import UsageError
from decoderkit.base.model_files import check_model_files, model_file


def hf_cache(tmp_path, files: dict[str, str]):
    """A cache repository REPO/snapshots/REV whose files are links to REPO/blobs/."""
    repo = tmp_path / "models--org--tiny"
    (repo / "blobs").mkdir(parents=True)
    snapshot = repo / "snapshots" / "0123abcd"
    snapshot.mkdir(parents=True)
    for i, (name, text) in enumerate(files.items()):
        (repo / "blobs" / f"sha{i}").write_text(text)
        (snapshot / name).symlink_to(f"../../blobs/sha{i}")
    return snapshot


def test_links_inside_and_in_the_hugging_face_cache_are_followed(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "real.json").write_text("{}")
    (tmp_path / "d" / "config.json").symlink_to("real.json")
    assert model_file(tmp_path / "d", "config.json") == tmp_path / "d" / "config.json"
    assert model_file(tmp_path / "d", "absent.json") == tmp_path / "d" / "absent.json"
    snapshot = hf_cache(tmp_path, {"config.json": "{}"})
    assert model_file(snapshot, "config.json").read_text() == "{}"
    (tmp_path / "alias").symlink_to(snapshot)  # the directory itself named through a link
    check_model_files(tmp_path / "alias")


def test_a_link_out_of_the_directory_is_refused(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("SECRET-API-KEY=1")
    d = tmp_path / "d"
    (d / "sub").mkdir(parents=True)
    (d / "sub" / "tokenizer.json").symlink_to(secret)
    with pytest.raises(UsageError, match=f"is a link to {secret}, outside the model directory"):
        check_model_files(d)
    with pytest.raises(UsageError, match="outside the model directory"):
        model_file(d, "sub/tokenizer.json")
    (d / "sub" / "tokenizer.json").unlink()
    (d / "up").symlink_to("..")  # a folder on the way
    with pytest.raises(UsageError, match="outside the model directory"):
        model_file(d, "up/secret.txt")
    snapshot = hf_cache(tmp_path / "cache", {})  # blobs of another repository are not its own
    (snapshot / "config.json").symlink_to(os.path.relpath(secret, snapshot))
    with pytest.raises(UsageError, match="outside the model directory"):
        check_model_files(snapshot)


def test_a_dangling_link_is_named(tmp_path):
    (tmp_path / "chat_template.jinja").symlink_to("gone.jinja")
    with pytest.raises(UsageError, match="is a dangling symlink \\(to gone.jinja\\)"):
        check_model_files(tmp_path)
    (tmp_path / "loop").symlink_to("loop")
    with pytest.raises(UsageError, match="loop cannot be read"):
        model_file(tmp_path, "loop")
