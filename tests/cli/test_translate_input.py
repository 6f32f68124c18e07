"""decoderkit translate on messy input: stdin read as bytes, a bad line reported with its
number while the others are translated (exit status 1), unseen characters named once."""

import io
import subprocess
import sys

import pytest

from conftest import tiny_checkpoint
from decoderkit.cli import main


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return tiny_checkpoint(tmp_path_factory.mktemp("t") / "ckpt")


def stdin(monkeypatch, data: bytes) -> None:
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(data)))


def test_an_undecodable_line_is_reported_and_the_others_translated(ckpt, capsys,
                                                                   monkeypatch):
    assert main(["translate", "--checkpoint", str(ckpt), "29 Nov", "1/2"]) == 0
    expected = capsys.readouterr().out.splitlines()
    stdin(monkeypatch, b"29 Nov\n\xff\xfe junk\n1/2\n")
    assert main(["translate", "--checkpoint", str(ckpt)]) == 1
    captured = capsys.readouterr()
    assert captured.out.splitlines() == [expected[0], "", expected[1]]  # aligned with input
    err = captured.err.splitlines()
    assert "line 2: not UTF-8 (byte 0xff at column 1)" in err
    assert "1 of 3 line(s) not translated" in err and "Traceback" not in captured.err


def test_a_line_too_long_for_the_model_is_reported_and_the_others_translated(ckpt, capsys):
    too_long = "1" * 100  # the checkpoint's max_len is 64
    assert main(["translate", "--checkpoint", str(ckpt), "29 Nov", too_long, "1/2"]) == 1
    captured = capsys.readouterr()
    assert len(captured.out.splitlines()) == 3 and captured.out.splitlines()[1] == ""
    assert "line 2: the line has 100 tokens, more than the model's max_len 64" in captured.err


def test_stdin_is_split_on_newlines_only_and_a_bom_is_dropped(ckpt, capsys, monkeypatch):
    stdin(monkeypatch, "\ufeff29 Nov\u20281/2\r\n".encode())
    assert main(["translate", "--checkpoint", str(ckpt)]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 1


def test_unseen_characters_are_named_once(ckpt, capsys):
    assert main(["translate", "--checkpoint", str(ckpt), "29 Nov é", "Nov é!"]) == 0
    err = capsys.readouterr().err
    assert err.count("never saw") == 1
    assert "2 character(s)" in err and "'!'" in err and "'é'" in err
    assert main(["translate", "--checkpoint", str(ckpt), "29 Nov"]) == 0
    assert capsys.readouterr().err == ""


def test_exit_status_of_a_partial_job_through_a_real_process(ckpt):
    done = subprocess.run([sys.executable, "-m", "decoderkit", "translate", "--checkpoint",
                           str(ckpt)], input=b"12\n\xc3(\n", capture_output=True, timeout=120)
    assert done.returncode == 1
    assert done.stdout.decode().count("\n") == 2
    assert b"line 2: not UTF-8" in done.stderr and b"Traceback" not in done.stderr
