"""Atomic file writes: a file is written under a temporary sibling name, then renamed, so a
crash never leaves a half-written file at the real path. Output files replace only an earlier
output of the same command (``check_output_file``): never a user's own file.

The temporary name is hidden and unique (``.NAME.decoderkit-<random>.tmp``), so it can never
be a file of the user's (``NAME.tmp`` is left alone); it is removed if the write fails, and one
that a killed process left is removed by the next write of the same path, naming it
(``base.temps``). Also the sha256 of a file, read in blocks (checkpoint checksums, the corpus
record).
"""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import stat
from collections.abc import Callable, Iterable
from pathlib import Path

from decoderkit.base.errors import UsageError
from decoderkit.base.temps import (  # noqa: F401 (TEMP_PREFIX: public here)
    TEMP_PREFIX,
    held,
    remove_leftovers,
    temp_sibling,
)

MARK_WINDOW = 1 << 16  # an output's mark (``check_output_file``) lies in its first bytes


# How a full disk (or quota) shows in the writers we call: OSError's errno; torch.save's zip
# writer ("unexpected pos N vs M", "file write failed"); safetensors ("os error 28").
FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
FULL_MESSAGES = ("unexpected pos", "file write failed", "no space left", "os error 28",
                 "os error 122")


def out_of_space(err: BaseException, where: str | Path) -> UsageError | None:
    """The one-line refusal of a write into the directory ``where`` that failed for want of
    space, whichever library raised it (``FULL_ERRNOS``, ``FULL_MESSAGES``); None when ``err``
    is anything else (then it is re-raised as it is)."""
    full = (err.errno in FULL_ERRNOS if isinstance(err, OSError)
            else isinstance(err, Exception) and not isinstance(err, UsageError)
            and any(m in str(err).lower() for m in FULL_MESSAGES))
    if not full:
        return None
    where = Path(where)
    while TEMP_PREFIX in where.name and where.name.startswith("."):
        where = where.parent  # a file inside a temporary directory: name the user's one
    return UsageError(f"no space left on {where} (the partial write was removed; free some "
                      "space there or write elsewhere)")


def write_atomic(path: str | Path, write: Callable[[Path], object]) -> Path:
    """Call ``write(tmp)`` on a new temporary sibling of ``path``, then rename it to ``path``;
    a full disk is a ``UsageError`` (``out_of_space``), the temporary removed."""
    path = Path(path)
    remove_leftovers(path)
    tmp = temp_sibling(path)
    tmp.touch(exist_ok=False)
    try:
        with held(tmp):  # ours while it is written: no other process's leftover
            write(tmp)
            tmp.replace(path)
    except BaseException as err:
        tmp.unlink(missing_ok=True)  # ours: made by write() just now
        full = out_of_space(err, path.parent)
        if full is not None:
            raise full from None
        raise
    return path


def file_sha256(path: str | Path) -> str:
    """Hex sha256 of a file's bytes, read in blocks."""
    digest = hashlib.sha256()
    with Path(path).open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def files_sha256(files: list[str | Path]) -> str:
    """One sha256 over the files, in order (the digest of their digests): what a run
    directory records of its corpus or text; an unreadable file is a ``UsageError``."""
    digest = hashlib.sha256()
    for file in files:
        try:
            digest.update(bytes.fromhex(file_sha256(file)))
        except OSError as err:
            raise UsageError(f"{file}: cannot read ({err.strerror or err})") from None
    return digest.hexdigest()


def swap_in_directory(new: Path, final: Path, holder_suffix: str, content: str) -> None:
    """Rename the directory ``new`` to ``final``. A previous ``final`` waits meanwhile as
    ``content`` inside a hidden holder (``temp_sibling(final, holder_suffix)``), is put back if
    the rename fails, and is removed once ``new`` is in place."""
    if not final.exists():
        new.rename(final)
        return
    holder = temp_sibling(final, suffix=holder_suffix)
    holder.mkdir()
    with held(holder):
        final.rename(holder / content)
        try:
            new.rename(final)
        except BaseException:
            (holder / content).rename(final)  # put the previous one back
            holder.rmdir()
            raise
        shutil.rmtree(holder)  # ours: made above, holds only the replaced directory


def output_mark(command: str) -> str:
    """What every output file of ``decoderkit COMMAND`` carries in its first bytes (a JSON
    ``"written_by"`` value, PNG/SVG metadata), so a later run knows the file is its own;
    worded so that no command line quoted in a user's file or notebook carries it."""
    return f"decoderkit {command} output file"


def check_output_file(path: str | Path, flag: str, command: str) -> Path:
    """The one rule for output file paths: ``path`` must be new, or a regular file that an
    earlier ``decoderkit COMMAND`` wrote (its ``output_mark`` in its first ``MARK_WINDOW``
    bytes). A user's file, a directory, a symlink or an empty path is a ``UsageError`` naming
    ``flag``: nothing of the user's is replaced."""
    if str(path) == "":
        raise UsageError(f"{flag} must name a file, got ''")
    path = Path(path)
    if path.is_symlink():
        raise UsageError(f"{flag} {path} is a symlink; refusing to replace it: name the file "
                         "itself or another path")
    if not path.exists():
        return path
    if not path.is_file():
        raise UsageError(f"{flag} {path} exists and is not a regular file; refusing to "
                         "replace it")
    try:
        with path.open("rb") as f:
            head = f.read(MARK_WINDOW)
    except OSError as err:
        raise UsageError(f"{flag} {path}: cannot read ({err.strerror or err})") from None
    if output_mark(command).encode() not in head:
        raise UsageError(f"{flag} {path} exists and was not written by decoderkit {command}; "
                         "refusing to replace it: choose another path (or remove it)")
    return path


def write_output(path: str | Path, flag: str, command: str,
                 write: Callable[[Path], object]) -> Path:
    """``write_atomic`` to an output file path that passes ``check_output_file``."""
    return write_atomic(check_output_file(path, flag, command), write)


def write_directory(out: str | Path, flag: str, fill: Callable[[Path], object],
                    check: Callable[[Path], object], holder: tuple[str, str]) -> Path:
    """The one atomic directory writer (checkpoints and exports): ``out`` is resolved once
    (``resolve_output_dir``, ``flag`` naming it), ``check(real)`` refuses what may not be
    replaced, ``fill(tmp)`` writes the complete new directory under a hidden sibling name,
    which is then swapped in (``swap_in_directory``; ``holder`` = (its suffix, the name inside)
    where the previous one waits). A ``fill`` that fails removes the temporary and leaves
    ``out`` as it was (a full disk: ``out_of_space``'s one line); what a killed earlier write
    left beside ``out`` is removed first (``base.temps.remove_leftovers``). A symlink ``out``
    keeps pointing at its target, which is replaced."""
    final = resolve_output_dir(out, flag, replaced=True)
    check(final)
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        remove_leftovers(final)
        tmp = temp_sibling(final, suffix="")
        tmp.mkdir()
    except OSError as err:  # /proc, a read-only or full filesystem, no permission
        raise cannot_write(flag, out, err) from None
    try:
        with held(tmp):  # ours while it is filled: no other process's leftover
            fill(tmp)
            swap_in_directory(tmp, final, *holder)
    except BaseException as err:
        shutil.rmtree(tmp, ignore_errors=True)  # ours, made above (gone once swapped in)
        full = out_of_space(err, final.parent)
        if full is not None:
            raise full from None
        raise
    return final


def entries(directory: Path) -> dict[str, str]:
    """Everything below ``directory`` (symlinks not followed), relative POSIX path -> 'file',
    'directory' or 'other' (a symlink, a pipe, ...)."""
    found = {}
    for root, dirs, files in os.walk(directory):
        for name in dirs + files:
            path = Path(root) / name
            kind = ("other" if path.is_symlink() else "directory" if path.is_dir()
                    else "file" if path.is_file() else "other")
            found[path.relative_to(directory).as_posix()] = kind
    return found


def foreign_entries(directory: Path, owned: Iterable[str]) -> list[str]:
    """What replacing ``directory`` would delete that is neither one of the ``owned`` regular
    files (relative POSIX paths: what this program wrote there) nor a folder holding one,
    sorted: the one rule by which a save or an export never deletes a user's file."""
    owned = set(owned)
    folders = {parent.as_posix() for f in owned for parent in Path(f).parents} - {"."}
    return sorted(name for name, kind in entries(directory).items()
                  if not (kind == "file" and name in owned
                          or kind == "directory" and name in folders))


NAME_MAX, PATH_MAX = 255, 4096  # Linux's limits on one name and on a whole path, in bytes
TEMP_ROOM = 48  # bytes a hidden sibling (``temp_sibling``, its holder) adds to a name


def resolve_output_dir(path: str | Path, flag: str, replaced: bool = False) -> Path:
    """The real directory an output path names, resolved once (symlinks followed, ``..``
    folded), so that its lock and every write act on that one directory, whatever alias
    named it, and a symlink the user made keeps pointing at it. Refused before any work
    (``UsageError`` naming ``flag``): an empty path, a symlink loop, a dangling symlink, a name
    too long for the filesystem; with ``replaced`` (the directory is swapped for a new one on
    each save) also the working directory and any directory holding it."""
    if str(path) == "":
        raise UsageError(f"{flag} must name a directory, got ''")
    if "\x00" in str(path):
        raise UsageError(f"{flag} {str(path)!r}: a name cannot hold a NUL byte")
    given = Path(path)
    names = [len(os.fsencode(part)) for part in given.absolute().parts]
    if len(os.fsencode(str(given.absolute()))) > PATH_MAX - TEMP_ROOM or max(names) > NAME_MAX \
            or names[-1] > NAME_MAX - TEMP_ROOM:
        raise UsageError(f"{flag} {path}: name too long (at most {NAME_MAX - TEMP_ROOM} bytes "
                         f"a name, {PATH_MAX - TEMP_ROOM} the whole path)")
    try:
        real = given.resolve()
        for link in (given, *given.parents):
            if link.is_symlink() and not link.exists():
                raise UsageError(f"{flag} {path}: {link} is a dangling symlink (to "
                                 f"{os.readlink(link)}); make its target or name another path")
        above = next(p for p in real.parents if p.exists())
    except (RuntimeError, OSError) as err:  # RuntimeError: a symlink loop (Python < 3.13)
        raise UsageError(f"{flag} {path}: cannot resolve it ({_reason(err)})") from None
    if not above.is_dir():
        raise UsageError(f"{flag} {path}: {above} {describe(above) or 'is a regular file'}, "
                         "not a directory: no directory can be made under it")
    if replaced and real in (Path.cwd().resolve(), *Path.cwd().resolve().parents):
        raise UsageError(f"{flag} {path} is the working directory or holds it; name a "
                         "directory of its own (e.g. runs/NAME)")
    return real


def _reason(err: BaseException) -> str:
    """An OS error's reason in words, with the path it names where that says more."""
    if not isinstance(err, OSError) or not err.strerror:
        return str(err)
    named = err.filename and TEMP_PREFIX not in os.fsdecode(err.filename)  # not our temporary
    return err.strerror + (f": {err.filename}" if named else "")


def cannot_write(flag: str, path: str | Path, err: OSError) -> UsageError:
    """The one line of an output ``path`` (``flag``'s) the OS refused to create."""
    return UsageError(f"{flag} {path}: cannot be made there ({_reason(err)})")


TEXT_BYTES = 256 << 20  # the most a config, vocabulary, tokenizer or meta file may hold (GPT-2's
# tokenizer: 2 MB); a bound given to check_input_file for every such file of a foreign format


def describe(path: str | Path) -> str | None:
    """What ``path`` is, if not an existing regular file: 'does not exist', 'is a directory',
    'is a named pipe', 'is a character device', ... (None: a regular file, symlinks followed)."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "is a dangling symlink" if os.path.islink(path) else "does not exist"
    except OSError as err:  # a symlink loop, a name too long, no permission
        return f"cannot be read ({err.strerror or err})"
    except ValueError:  # the OS takes no name holding a NUL byte
        return "cannot be a file's name (it holds a NUL byte)"
    kinds = ((stat.S_ISREG, None), (stat.S_ISDIR, "is a directory"),
             (stat.S_ISFIFO, "is a named pipe"), (stat.S_ISCHR, "is a character device"),
             (stat.S_ISBLK, "is a block device"), (stat.S_ISSOCK, "is a socket"))
    return next((kind for test, kind in kinds if test(mode)), "is not a regular file")


def check_input_file(path: str | Path, what: str, max_bytes: int | None = None) -> Path:
    """``path`` if it is an existing regular file of at most ``max_bytes``; else a
    ``UsageError`` saying what it is instead (``what`` names its role: '--data', 'the
    checkpoint's meta.json'), so that nothing blocks on a pipe or a device, or reads a huge
    file into memory."""
    kind = describe(path)
    if kind is not None:
        expected = ", not a regular file" if kind.startswith("is a") else ""
        raise UsageError(f"{what} {path} {kind}{expected}")
    size = os.stat(path).st_size
    if max_bytes is not None and size > max_bytes:
        raise UsageError(f"{what} {path} is {size} bytes, more than the {max_bytes} such a "
                         "file can have: damaged or not the right file")
    return Path(path)
