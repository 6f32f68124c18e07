"""interop.artifacts: an export directory replaces only what its previous manifest lists, and
a symlink --out keeps pointing at its target, the real directory being what is written."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from decoderkit.base.errors import UsageError
from decoderkit.interop.artifacts import MANIFEST, write_directory


def fill(version: str):
    """A stand-in engine's export: a manifest, a weights file and one in a sub-folder."""
    def write(tmp: Path) -> None:
        (tmp / MANIFEST).write_text(json.dumps({"engine": "test", "version": version}))
        (tmp / "model.bin").write_text(version)
        (tmp / "vocab").mkdir()
        (tmp / "vocab" / "src.txt").write_text(version)
    return write


def version(out: Path) -> str:
    return json.loads((out / MANIFEST).read_text())["version"]


def test_overwrite_replaces_an_export_holding_only_its_listed_files(tmp_path):
    out = write_directory(tmp_path / "out", False, fill("1"))
    assert json.loads((out / MANIFEST).read_text())["files"] == [
        MANIFEST, "model.bin", "vocab/src.txt"]
    write_directory(out, True, fill("2"))
    assert version(out) == "2" and (out / "vocab" / "src.txt").read_text() == "2"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no temporaries left


@pytest.mark.parametrize("made", ["folder", "nested folder", "symlink to a folder",
                                  "symlink to a file", "symlink in place of a listed file"])
def test_what_a_user_put_inside_out_survives_and_is_named(tmp_path, made):
    out = write_directory(tmp_path / "out", False, fill("1"))
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "data.txt").write_text("mine")
    name = {"folder": "notes", "nested folder": "vocab/extra", "symlink to a folder": "link",
            "symlink to a file": "link.txt", "symlink in place of a listed file": "model.bin"}[
        made]
    if made.endswith("folder") and not made.startswith("symlink"):
        (out / name).mkdir()
    else:
        if (out / name).exists():
            (out / name).unlink()
        target = mine if made == "symlink to a folder" else mine / "data.txt"
        (out / name).symlink_to(target)
    with pytest.raises(UsageError, match=name) as caught:
        write_directory(out, True, fill("2"))
    assert "--overwrite" in str(caught.value)
    assert version(out) == "1"
    assert os.path.lexists(out / name) and (mine / "data.txt").read_text() == "mine"


def test_out_through_a_symlink_writes_the_target_and_keeps_the_link(tmp_path):
    real = tmp_path / "exports" / "ct2"
    real.parent.mkdir()
    link = tmp_path / "latest"
    link.symlink_to(real, target_is_directory=True)
    with pytest.raises(UsageError, match="dangling symlink"):  # a link to nothing: refused
        write_directory(link, False, fill("0"))
    write_directory(real, False, fill("1"))
    write_directory(link, True, fill("2"))
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert version(real) == "2" and version(link) == "2"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exports", "latest"]
    assert sorted(p.name for p in real.parent.iterdir()) == ["ct2"]


@pytest.mark.parametrize("out", ["", "."])
def test_empty_and_working_directory_out_are_refused(tmp_path, monkeypatch, out):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError, match="--out"):
        write_directory(out, True, fill("1"))
    assert list(tmp_path.iterdir()) == []
