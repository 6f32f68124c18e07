"""A learner file that starts processes or kills its parent cannot hurt the grading run: every
process it started is gone when ``grade_file`` returns, and killing its parent kills only the
supervisor between the grader and the child (with the sandbox off; inside it the supervisor is
the init of the file's PID namespace, which no signal from inside reaches); the other files are
still graded. Each test runs in both modes (``conftest.mode``)."""

from __future__ import annotations

import json
import secrets

from grade.run.run_helpers import NUMPY_PE, assert_none_left, hostile_file

from decoderkit.cli import main
from decoderkit.grade import grader
from decoderkit.grade.run import supervisor

def test_processes_a_file_starts_or_detaches_are_all_gone_when_grading_returns(tmp_path, mode):
    path = tmp_path / "escapes.py"
    token = hostile_file(path, (
        "if os.fork() == 0:  # a plain child, in the file's process group\n"
        "    os.execv(sys.executable, SLEEP)\n"
        "subprocess.Popen(SLEEP, start_new_session=True)  # a session of its own\n"
        "subprocess.Popen(SLEEP, start_new_session=True, env={})  # without the marker\n"
        "middle = os.fork()\n"
        "if middle == 0:  # double fork: the grandchild is orphaned at once\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        "        os.execv(sys.executable, SLEEP)\n"
        "    os._exit(0)\n"
        "os.waitpid(middle, 0)\n") + NUMPY_PE)
    report = grader.grade_file(path, "000", call_seconds=4, wall_seconds=60)
    assert_none_left(token)
    assert report.problem is None, report.problem
    assert [o.status for o in report.outcomes] == ["pass"]  # graded all the same
    assert report.left_running == 4
    assert "it left 4 process(es) running (killed)" in report.summary()


def test_a_file_stopped_at_the_wall_clock_leaves_no_process_either(tmp_path, mode):
    """(On a loaded machine the stop may come before the file starts them: no harm.)"""
    path = tmp_path / "hangs.py"
    token = hostile_file(path, (
        "subprocess.Popen(SLEEP, start_new_session=True, env={})\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    os.execv(sys.executable, SLEEP)\n"
        "signal.signal(signal.SIGALRM, signal.SIG_IGN)  # its own alarm cannot stop it\n"
        "while True:\n"
        "    pass\n"))
    report = grader.grade_file(path, "000", call_seconds=1, wall_seconds=8)
    assert_none_left(token)
    assert "stopped after 8 s wall-clock" in report.problem


def test_killing_its_parent_stops_nothing_and_the_other_files_are_graded(tmp_path, capsys,
                                                                        mode):
    """The file's parent is the supervisor: the grading run goes on, the file's own calls
    still run (and pass), the report names what it did, and nothing it started is left.
    Inside the sandbox the kill does not reach the supervisor (its PID namespace's init)."""
    hostile, good = tmp_path / "hostile.py", tmp_path / "good.py"
    token = hostile_file(hostile, (
        "subprocess.Popen(SLEEP, start_new_session=True)\n"
        "with open('supervisor.json', 'w') as f:  # a forged all-clear, in its working dir\n"
        "    f.write('{\"code\": 0, \"stopped\": false, \"left_running\": 0}')\n"
        "os.kill(os.getppid(), signal.SIGKILL)\n") + NUMPY_PE)
    good.write_text(NUMPY_PE)
    out = tmp_path / "class.json"
    code = main(["grade", str(hostile), str(good), "--exercise", "000", "--json", str(out)])
    assert_none_left(token)
    text, err = capsys.readouterr()
    assert f"PASS  {good}" in text
    doc = json.loads(out.read_text())
    first = doc["files"][0]
    assert [i["status"] for i in first["items"]] == ["pass"]  # its calls ran to the end
    assert doc["files"][1]["passed"]
    if mode == "sandbox":
        assert code == 0 and "2 of 2 files pass" in text and err == ""
        assert first["problem"] is None and first["left_running"] == 1  # the forgery undone
    else:  # one line says the sandbox is off, once for the whole run
        assert code == 1 and "1 of 2 files pass" in text
        assert "killed or stopped its parent process" in first["problem"]
        assert err.splitlines() == [
            "note: the grader's sandbox is off (turned off by the test); learner code runs "
            "with time and resource limits only, and can read your files and reach the "
            "network: install it with: apt-get install bubblewrap"]


def test_kill_marked_ends_only_the_runs_processes(tmp_path):
    """The marker scan signals the processes carrying this run's token, not another run's."""
    import subprocess
    import sys

    ours, theirs = secrets.token_hex(8), secrets.token_hex(8)
    sleep = [sys.executable, "-c", "import time; time.sleep(600)"]
    procs = [subprocess.Popen([*sleep, token], env={supervisor.MARKER: token},
                              start_new_session=True) for token in (ours, theirs)]
    try:
        assert supervisor.kill_marked(ours) == 1
        assert procs[0].wait(timeout=30) == -9
        assert procs[1].poll() is None
    finally:
        for p in procs:
            p.kill()
            p.wait()


def test_without_proc_the_scan_finds_nothing_and_does_not_fail(monkeypatch):
    """Off Linux there is no /proc: the supervisor's group kill is then all there is."""
    def no_proc(path):
        raise FileNotFoundError(path)

    monkeypatch.setattr(supervisor.os, "listdir", no_proc)
    assert supervisor.kill_marked(secrets.token_hex(8)) == 0
