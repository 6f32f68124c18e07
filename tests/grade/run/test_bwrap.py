"""Inside the grader's sandbox a graded file cannot write outside its working folder, read the
caller's or the system's private files, reach any server, or leave a process behind; each
attempt is a report line naming the sandbox, never a traceback. Where bwrap cannot run, the
grader says so in one line (``bwrap.note``) and these tests are skipped with the reason."""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from grade.run.run_helpers import NUMPY_PE, assert_none_left, hostile_file, running

from decoderkit.grade import grader
from decoderkit.grade.run import bwrap, sandbox

LICENSES = Path("/usr/share/common-licenses")  # Debian's: stands in for a home folder below
NO_NETWORK = "blocked by the grader's sandbox: it has no network"


def _grade(path: Path) -> grader.FileReport:
    return grader.grade_file(path, "000", call_seconds=4, wall_seconds=60)


def _blocked(tmp_path: Path, body: str) -> grader.FileReport:
    """Grade a file whose top-level code is ``body`` (then a correct numpy_pe)."""
    path = tmp_path / "hostile.py"
    path.write_text(f"import os, socket\n{body}\n{NUMPY_PE}")
    report = _grade(path)
    assert not report.passed and "Traceback" not in report.summary()
    return report


def test_writing_outside_its_folder_fails_and_leaves_nothing(tmp_path, monkeypatch,
                                                             sandbox_on):
    """Not in the temporary folder, not beside the graded file, not in the caller's working
    folder (which lies in a hidden folder here; read-only elsewhere)."""
    cwd, name = tmp_path / "cwd", f"/tmp/sandbox-{secrets.token_hex(8)}"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    hidden = next(f for f in bwrap.hidden_folders() if str(cwd).startswith(f + "/"))
    for target, refusal in [
            (name, "OSError: [Errno 30] Read-only file system"),
            (str(tmp_path / "beside.txt"), "OSError: [Errno 30] Read-only file system"),
            (str(cwd / "out.txt"), "FileNotFoundError: [Errno 2] No such file or directory"),
            ("/dev/x", "OSError: [Errno 30] Read-only file system")]:
        report = _blocked(tmp_path, f"open({target!r}, 'w').write('x')")
        why = f"{hidden} is hidden from it" if "NotFound" in refusal else \
            "only its working folder is writable"
        assert (f"the file did not run: {refusal}: {target!r} (line 2); blocked by the "
                f"grader's sandbox: {why}") in report.problem
        assert not os.path.exists(target)
    assert os.listdir(cwd) == []


def test_dev_shm_is_small(tmp_path, sandbox_on):
    """/dev/shm is memory: two files of 40 MB (each under the 64 MB file-size limit) do not fit
    where this bwrap can bound it."""
    if not bwrap._shm_size():
        pytest.skip("this bwrap has no --size: /dev/shm is bounded by memory only")
    report = _blocked(tmp_path, "for i in range(2):\n"
                                "    open(f'/dev/shm/{i}', 'wb').write(bytes(40 * 2 ** 20))")
    assert "the file did not run: OSError: [Errno 28] No space left on device (line 3)" \
        in report.problem


def test_private_files_cannot_be_read(tmp_path, monkeypatch, sandbox_on):
    """/etc/shadow (readable by root outside) and the caller's home (here a Debian folder
    named as HOME, since the real one is this machine's): hidden."""
    if not os.path.exists("/etc/shadow") or not (LICENSES / "GPL-3").exists():
        pytest.skip("needs Debian's /etc/shadow and /usr/share/common-licenses/GPL-3")
    report = _blocked(tmp_path, "print(open('/etc/shadow').read())")
    assert "PermissionError: [Errno 13] Permission denied: '/etc/shadow' (line 2); blocked by " \
           "the grader's sandbox: your files and the system's private ones are hidden" \
           in report.problem
    monkeypatch.setenv("HOME", str(LICENSES))
    report = _blocked(tmp_path, f"print(open({str(LICENSES / 'GPL-3')!r}).read())")
    assert f"FileNotFoundError: [Errno 2] No such file or directory: '{LICENSES}/GPL-3' " \
           f"(line 2); blocked by the grader's sandbox: {LICENSES} is hidden from it" \
           in report.problem


def _package_folders() -> set[str]:
    """decoderkit's package folders: the grader's own and the one ``python -I`` would import."""
    found = subprocess.run([sys.executable, "-I", "-c", "import importlib.util as u; "
                            "print(*u.find_spec('decoderkit').submodule_search_locations)"],
                           capture_output=True, text=True, check=True).stdout.split()
    return {str(sandbox.PACKAGE_DIR), *found}


def test_decoderkit_itself_is_hidden_from_the_graded_code(tmp_path, sandbox_on):
    """The reference cannot become the learner's answer, and what the file used cannot rest on
    what it reports itself: importing decoderkit fails, naming why, even in a file that then
    rewrites its status file at exit; its sources cannot be read either, not even through
    ctypes (which no audit hook sees)."""
    forged = '{"imported": true, "finished": true, "found": ["subsequent_mask"], "decoderkit": []}'
    path = tmp_path / "borrowed.py"
    borrow = "from decoderkit.nn.masks import causal_mask as subsequent_mask\n"
    path.write_text("import atexit, os\n" + borrow)
    report = grader.grade_file(path, "001", call_seconds=4, wall_seconds=60)
    assert report.problem == ("the file did not run: ModuleNotFoundError: No module named "
                              "'decoderkit.nn' (line 2); blocked by the grader's sandbox: "
                              "decoderkit itself is hidden from the code it grades")
    path.write_text("import atexit, os\n"
                    f"atexit.register(lambda: open('status.json', 'w').write({forged!r}))\n"
                    + borrow)
    report = grader.grade_file(path, "001", call_seconds=4, wall_seconds=60)
    assert not report.passed, report.summary()
    path.write_text("import decoderkit\ntry:\n    import decoderkit.nn\nexcept ImportError:\n"
                    "    pass\n" + NUMPY_PE)  # found nothing: not a use of decoderkit
    report = _grade(path)
    assert report.passed and report.decoderkit == [], report.summary()
    for folder in _package_folders():
        source = os.path.join(folder, "nn", "masks.py")
        assert os.path.exists(source)
        path.write_text(f"import ctypes, os\nfd = ctypes.CDLL(None).open({source.encode()!r}, "
                        "os.O_RDONLY)\nassert fd < 0, 'read decoderkit through ctypes'\n"
                        + NUMPY_PE)
        report = _grade(path)
        assert report.passed, report.summary()


def test_no_server_is_reachable(tmp_path, sandbox_on):
    """A server this test opens on 127.0.0.1 gets no connection; a public address (TEST-NET-1,
    tried only once the file has seen that it has no interface but loopback) is unreachable."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        report = _blocked(tmp_path, f"socket.create_connection(('127.0.0.1', {port}), 5)")
        assert "ConnectionRefusedError: [Errno 111] Connection refused (line 2); " \
               f"{NO_NETWORK}" in report.problem
        server.setblocking(False)
        with pytest.raises(BlockingIOError):
            server.accept()
    report = _blocked(tmp_path, (
        "assert [n for _, n in socket.if_nameindex()] == ['lo'], 'has a network: not trying'\n"
        "socket.create_connection(('192.0.2.1', 80), 5)"))
    assert "OSError: [Errno 101] Network is unreachable (line 3); " f"{NO_NETWORK}" \
        in report.problem


def test_a_detached_process_dies_with_the_sandbox_when_its_supervisor_is_killed(tmp_path,
                                                                               sandbox_on):
    """The PID namespace and --die-with-parent: killing the process the grader started (as a
    file that could kill its supervisor would) ends everything inside, setsid or not."""
    token = secrets.token_hex(8)
    sleep = [sys.executable, "-c", "import time; time.sleep(600)", token]
    script = f"import subprocess, time\nsubprocess.Popen({sleep!r}, start_new_session=True)\n" \
             "time.sleep(600)\n"
    proc = subprocess.Popen([*bwrap.command(tmp_path, []), sys.executable, "-c", script],
                            stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not running(token) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert running(token), "the detached sleeper never started"
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert_none_left(token)


def test_a_file_that_leaves_processes_and_kills_its_supervisor_leaves_nothing(tmp_path,
                                                                              sandbox_on):
    """The file's kills (its parent, the namespace's init) reach nothing; the processes it
    detached are counted in the report and gone."""
    path = tmp_path / "escapes.py"
    token = hostile_file(path, (
        "subprocess.Popen(SLEEP, start_new_session=True, env={})\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    os.execv(sys.executable, SLEEP)\n"
        "os.kill(os.getppid(), signal.SIGKILL)\n"
        "os.kill(1, signal.SIGKILL)\n") + NUMPY_PE)
    report = _grade(path)
    assert_none_left(token)
    assert report.problem is None and report.passed
    assert "it left 2 process(es) running (killed)" in report.summary()


def test_unusable_says_why(monkeypatch, tmp_path):
    """No bwrap on PATH, or one that cannot make namespaces (an unprivileged container): the
    reason names it, and the note says how to install it."""
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(bwrap, "_shm_size", lambda: ())  # else it may cache the fake's answer
    assert bwrap.unusable.__wrapped__() == "bwrap is not installed"
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\n"
                    "exit 1\n")
    fake.chmod(0o755)
    assert bwrap.unusable.__wrapped__() == ("bwrap cannot make its namespaces here: bwrap: No "
                                            "permissions to create new namespace")
    monkeypatch.setattr(bwrap, "unusable", lambda: "bwrap is not installed")
    assert bwrap.note().endswith("install it with: apt-get install bubblewrap")
