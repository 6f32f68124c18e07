"""The output directory of a training run: what may be written there, and by whom.

A run refuses, before any work, a ``--out`` that is a regular file, that holds files other
than a checkpoint's, or a checkpoint's file names without a checkpoint (a user's own
``config.json`` or ``trainer.pt``: every save writes a whole checkpoint), that already holds a
checkpoint (unless resuming or overwriting), or that another run is writing into. The last is
a lock: ``fcntl.flock`` on the hidden file ``.DIR.decoderkit-lock`` beside ``DIR`` (a lock
file inside ``DIR`` would be swapped away by each save), held by the writing process for the
whole run. The lock file is left in place. Holding it, a run first removes the partial copies
that a killed run left beside ``DIR`` (``base.temps.remove_leftovers``), naming them. Under
torchrun rank 0 alone takes the lock and removes them (it alone writes); the other processes
make the same checks without it, so that none is refused for the lock rank 0 holds meanwhile.

``--out`` is resolved once (``run_dir``: symlinks followed, ``..`` folded): the lock, the
checks and every save act on the real directory, so no alias of it escapes its lock, and a
symlink the user made keeps pointing at it (the real directory is what each save replaces).
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from decoderkit.base.errors import UsageError
from decoderkit.base.files import TEMP_PREFIX, resolve_output_dir
from decoderkit.base.temps import remove_leftovers
from decoderkit.training import distributed
from decoderkit.training.checkpoint_dir import WEIGHTS, check_replaceable, has_checkpoint

LOCK_SUFFIX = f"{TEMP_PREFIX}lock"


def run_dir(out: str | Path) -> Path:
    """The real directory a run writes for ``--out`` (``base.files.resolve_output_dir``:
    refuses '', '.', a symlink loop, a dangling symlink, a name too long)."""
    return resolve_output_dir(out, "--out", replaced=True)


def check_out(out: str | Path, *, resume: bool, overwrite: bool,
              files: tuple[str, ...]) -> None:
    """Refuse, before any work, an output directory the run must not write into (also one
    that another run holds now); ``files``: what the checkpoint format owns. Torchrun's
    processes other than rank 0 check without the lock (rank 0 holds it, for the job)."""
    if distributed.launched_rank() != 0:
        _check(run_dir(out), resume, overwrite, files)
        return
    with claimed(out, resume=resume, overwrite=overwrite, files=files):
        pass  # the run (``fit``) claims it again, for its whole length


@contextmanager
def claimed(out: str | Path, *, resume: bool, overwrite: bool,
            files: tuple[str, ...]) -> Iterator[Path]:
    """Hold ``out``'s lock, having checked it is a directory this run may write into; yields
    the real directory (``run_dir``)."""
    out = run_dir(out)
    _check(out, resume, overwrite, files)
    with locked(out):
        remove_leftovers(out)  # partial copies a killed run left, named (base.temps)
        yield out


def _check(out: Path, resume: bool, overwrite: bool, files: tuple[str, ...]) -> None:
    """The refusals of ``check_out``, each naming what is there."""
    if resume and overwrite:
        raise UsageError("--resume and --overwrite exclude each other")
    check_replaceable(out, files)
    exists = has_checkpoint(out)
    kept = sorted(p.name for p in out.iterdir()) if out.is_dir() and not exists else []
    if kept:  # a save writes a whole checkpoint at once: these are someone's own files
        raise UsageError(f"{out} holds {', '.join(kept[:5])}{' ...' if len(kept) > 5 else ''} "
                         f"but no checkpoint (no {WEIGHTS}): files no run wrote; refusing to "
                         f"replace them, --overwrite or not: move them or choose another --out")
    if resume and not exists:
        raise UsageError(f"no checkpoint in {out} to resume")
    if exists and not (resume or overwrite):
        raise UsageError(f"{out} already holds a checkpoint; pass --resume to continue it "
                         f"or --overwrite to replace it")


@contextmanager
def locked(out: str | Path) -> Iterator[None]:
    """Hold the run lock of ``out`` (of its real directory, whatever alias names it);
    ``UsageError`` at once if another process holds it."""
    out = run_dir(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    lock = out.with_name(f".{out.name}{LOCK_SUFFIX}")
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise UsageError(f"another decoderkit run is writing into {out} (it holds {lock}); "
                             "wait for it to finish or choose another --out") from None
        yield
    finally:
        os.close(fd)  # releases the lock
