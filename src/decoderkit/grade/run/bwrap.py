"""The learner's processes inside Debian's bubblewrap (``bwrap``), where the machine allows it.

``command`` is the bwrap line the supervisor runs under: the whole filesystem read-only, the
places that hold a user's own or other people's files hidden (the caller's home, /root, /home,
/tmp, /var, /run, /mnt, /media, /srv: empty and read-only), every file or folder of /etc that
others may not read (/etc/shadow, private keys) hidden, /dev minimal and read-only but for a
small /dev/shm, and the run's work folder the one writable place; no network (its own network
namespace: loopback only), its own PID namespace with the supervisor as its init (no signal
from inside reaches it; when it ends, every process left in the namespace is killed), a user
namespace mapping it to ``nobody`` without capabilities, killed with its parent. What the
interpreter needs (its prefix, ``sys.path``, the graded file) is bound back read-only where it
lies under a hidden folder; decoderkit itself is hidden (``library_folders``) but for the
child's script and the supervisor, so the graded code cannot take the reference's answers.
``unusable`` says why it cannot run (bwrap missing, or no namespaces: an unprivileged
container); grading then keeps its time and resource limits only, and ``note`` is the one line
that says so.
"""

from __future__ import annotations

import functools
import os
import pwd
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

BWRAP = "bwrap"
INSTALL = "apt-get install bubblewrap"  # Debian's package (Ubuntu's too)
HIDDEN = ("/root", "/home", "/tmp", "/var", "/run", "/mnt", "/media", "/srv")  # + home, TMPDIR
PRIVATE_UNDER = "/etc"  # entries here that others may not read are hidden (/etc/shadow, keys)
NOBODY = "65534"  # the uid and gid the learner's code has inside
PRINT_PATH = "import sys; print(*sys.path, sep=chr(10))"  # the child's import path, a line each
PRINT_LIBRARY = ("import importlib.util as u; s = u.find_spec('decoderkit'); "
                 "print(*(s.submodule_search_locations or []) if s else [], sep=chr(10))")
LIBRARY = Path(__file__).parents[2]  # the grader's decoderkit package
RUNNER = (Path(__file__).with_name("child"), Path(__file__).with_name("supervisor.py"))
PROBE_SECONDS = 30  # the most a first trial of bwrap may take (a loaded machine)
SHM_BYTES = 64 * 1024**2  # /dev/shm's size (Docker's default): it is memory, not disk
OPTIONS = ("--ro-bind", "/", "/", "--unshare-all", "--unshare-user", "--uid", NOBODY, "--gid",
           NOBODY, "--die-with-parent", "--as-pid-1", "--new-session", "--cap-drop", "ALL",
           "--proc", "/proc", "--dev", "/dev")


@functools.cache
def unusable() -> str | None:
    """Why the sandbox cannot be used on this machine, or None when it can: tried once per
    process, by running the interpreter in it as a graded file's supervisor would be run."""
    if shutil.which(BWRAP) is None:
        return "bwrap is not installed"
    with tempfile.TemporaryDirectory(prefix="decoderkit-bwrap-") as work:
        try:
            done = subprocess.run([*command(Path(work), []), sys.executable, "-I", "-c", "pass"],
                                  stdin=subprocess.DEVNULL, capture_output=True,
                                  timeout=PROBE_SECONDS)
        except (OSError, subprocess.TimeoutExpired) as err:
            return f"bwrap did not run: {type(err).__name__}"
    if done.returncode != 0:
        lines = done.stderr.decode(errors="replace").strip().splitlines() or ["no message"]
        return f"bwrap cannot make its namespaces here: {lines[-1][:200]}"
    return None


def note() -> str | None:
    """The one line a grading run prints when the sandbox is off (None when it is on)."""
    reason = unusable()
    if reason is None:
        return None
    return (f"note: the grader's sandbox is off ({reason}); learner code runs with time and "
            f"resource limits only, and can read your files and reach the network: install "
            f"it with: {INSTALL}")


def command(work: Path, readable: list[Path]) -> list[str]:
    """The bwrap prefix for a run whose writable folder is ``work``; ``readable`` are the paths
    (the graded file) the learner's process must read besides the interpreter's own."""
    hidden = hidden_folders()
    args = [BWRAP, *OPTIONS, *_shm_size(), "--tmpfs", "/dev/shm"]
    for folder in hidden:
        args += ["--tmpfs", folder]
    for path, is_dir in _private_entries():
        args += ["--tmpfs", path] if is_dir else ["--ro-bind", "/dev/null", path]
    needed = [*readable, *_probe(PRINT_PATH), sys.prefix, sys.base_prefix, sys.exec_prefix,
              os.path.dirname(sys.executable), LIBRARY]
    for path in _outermost(p for p in _paths(needed) if _under(p, hidden)):
        args += ["--ro-bind", path, path]
    args += ["--bind", str(work), str(work)]
    for folder in hidden:
        args += ["--remount-ro", folder]
    return [*args, *_without_library(), "--remount-ro", "/dev", "--chdir", str(work), "--"]


def library_folders() -> list[str]:
    """decoderkit's package folders, which the graded code may not see: the grader's own and
    the one ``python -I`` would import (an editable install may point at another checkout)."""
    return _outermost(_paths([LIBRARY, *_probe(PRINT_LIBRARY)]))


def _without_library() -> list[str]:
    """bwrap arguments showing ``library_folders`` empty and read-only but for ``RUNNER``
    (the child's script and the supervisor): the reference can be neither imported nor read
    by the code graded, not even through ctypes, which no audit hook sees."""
    folders, args = library_folders(), []
    for folder in folders:
        args += ["--tmpfs", folder]
    for path in map(str, RUNNER):
        args += ["--ro-bind", path, path]
    for folder in folders:
        args += ["--remount-ro", folder]
    return args


@functools.cache
def _shm_size() -> tuple[str, ...]:
    """``--size SHM_BYTES`` where this bwrap has the option (with an older one /dev/shm is
    bounded by the machine's memory only)."""
    try:
        done = subprocess.run([BWRAP, "--help"], stdin=subprocess.DEVNULL, capture_output=True,
                              text=True, timeout=PROBE_SECONDS)
    except (OSError, subprocess.SubprocessError):
        return ()
    return ("--size", str(SHM_BYTES)) if "--size" in done.stdout + done.stderr else ()


@functools.cache
def _probe(code: str) -> tuple[str, ...]:
    """The lines ``python -I -c code`` prints: ``PRINT_PATH``, what the child imports from
    (the standard library, site-packages, editable installs; not the grader's script folder
    or PYTHONPATH), ``PRINT_LIBRARY``, where it would import decoderkit from."""
    try:
        done = subprocess.run([sys.executable, "-I", "-c", code],
                              stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=PROBE_SECONDS, check=True)
    except (OSError, subprocess.SubprocessError):
        return ()
    return tuple(line for line in done.stdout.splitlines() if line)


def hidden_folders() -> list[str]:
    """The folders shown empty: ``HIDDEN``, the caller's home and temporary folder (each one
    outermost: none inside another)."""
    homes = [os.environ.get("HOME", "")]
    try:
        homes.append(pwd.getpwuid(os.getuid()).pw_dir)
    except KeyError:  # a uid without a passwd entry (a container)
        pass
    folders = [os.path.realpath(p) for p in (*HIDDEN, *homes, tempfile.gettempdir()) if p]
    return _outermost(f for f in folders if f != "/" and os.path.isdir(f))


@functools.cache
def _private_entries() -> tuple[tuple[str, bool], ...]:
    """(path, is a folder) of every entry under ``PRIVATE_UNDER`` that others may not read
    (links are left: they point at what is checked itself); read once per process."""
    found = []
    for root, dirs, files in os.walk(PRIVATE_UNDER):
        for name in [*dirs, *files]:
            path = os.path.join(root, name)
            try:
                mode = os.lstat(path).st_mode
            except OSError:
                continue
            if not stat.S_ISLNK(mode) and not mode & stat.S_IROTH:
                found.append((path, stat.S_ISDIR(mode)))
        dirs[:] = [d for d in dirs if (os.path.join(root, d), True) not in found]
    return tuple(found)


def _paths(items) -> list[str]:
    """Each existing path as given (absolute) and as resolved: a link under a hidden folder is
    reached by its own name, what it points at by the other."""
    out = []
    for item in items:
        path = os.path.abspath(os.fspath(item)) if os.fspath(item) else ""
        if path and os.path.exists(path):
            out += [path, os.path.realpath(path)]
    return out


def _under(path: str, folders: list[str]) -> bool:
    return any(path == f or path.startswith(f.rstrip("/") + "/") for f in folders)


def _outermost(paths) -> list[str]:
    """The paths without duplicates and without those inside another, shortest first."""
    kept: list[str] = []
    for path in sorted(set(paths), key=lambda p: (len(p), p)):
        if not _under(path, kept):
            kept.append(path)
    return kept
