"""The one rule for reading a model directory's files: a file may be a symbolic link only where
a model directory's own layout makes one, so that a directory someone hands over cannot make
decoderkit read (and a server serve: ``GET /tokenizer_info``'s chat template) a file of the
machine outside it.

A link is followed when its target lies inside the (real) model directory, or the directory
is a snapshot of Hugging Face's cache (``models--ORG--NAME/snapshots/REV``) and the target is
one of that repository's ``blobs/`` (``snapshots/REV/config.json -> ../../blobs/SHA``, as
``huggingface_hub`` writes them). Any other link is refused naming where it points; a link
whose target is missing is named as a dangling symlink (not as a missing file). ``model_file`` is
the rule for one file, which every reader of a model directory's files applies (configs,
tokenizers, the chat template, weights and their shards); ``check_model_files`` applies it to
everything in a directory, once, where a model directory is opened.
"""

from __future__ import annotations

import os
from pathlib import Path

from decoderkit.base.errors import UsageError
from decoderkit.base.files import describe

SNAPSHOTS, BLOBS = "snapshots", "blobs"  # Hugging Face's cache: REPO/snapshots/REV -> REPO/blobs


def model_file(directory: str | Path, name: str | Path) -> Path:
    """``directory / name``, to be read as a file of the model directory ``directory``: a
    ``UsageError`` if it (or a folder on the way) is a link to outside the directory (Hugging
    Face's cache excepted: the module docstring), dangling or a loop. An absent file is
    returned as it is (the reader says it is missing)."""
    directory = Path(directory)
    path = directory / name
    if not os.path.lexists(path):
        return path
    try:
        real = path.resolve(strict=True)
        home = directory.resolve(strict=True)
    except FileNotFoundError:
        raise UsageError(f"{path} is a dangling symlink (to {_target(path)}): its target does "
                         "not exist") from None
    except (OSError, RuntimeError) as err:  # a loop (RuntimeError before Python 3.13)
        raise UsageError(f"{path} {describe(path) or f'cannot be followed ({err})'}") from None
    if real.is_relative_to(home) or _cached_blob(home, real):
        return path
    raise UsageError(f"{path} is a link to {real}, outside the model directory {directory}: "
                     f"not read (a model directory's files lie inside it, or in the Hugging "
                     f"Face cache's {BLOBS}/)")


def check_model_files(directory: str | Path) -> None:
    """``model_file``'s rule for every file and folder below ``directory`` (links to folders
    not entered): the first that breaks it is a ``UsageError``. A path that is not a
    directory is left to its reader."""
    directory = Path(directory)
    if not directory.is_dir():
        return
    for root, dirs, files in os.walk(directory):
        for name in dirs + files:
            path = Path(root) / name
            if path.is_symlink():
                model_file(directory, path.relative_to(directory))


def _cached_blob(home: Path, real: Path) -> bool:
    """Whether ``home`` is a snapshot of Hugging Face's cache and ``real`` one of its blobs."""
    return home.parent.name == SNAPSHOTS and real.parent == home.parent.parent / BLOBS


def _target(path: Path) -> str:
    """Where the first link on the way to ``path`` points, as written."""
    for link in (path, *path.parents):
        if link.is_symlink():
            return os.readlink(link)
    return "?"
