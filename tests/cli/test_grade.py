"""``decoderkit grade``: per-item lines, a summary per file, one JSON, exit status."""

from __future__ import annotations

import json
import os
from pathlib import Path

from decoderkit.cli import main
from decoderkit.grade.judge.catalogue import MISTAKES

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "grade"


def test_list_shows_every_item_with_signature_and_judging(capsys):
    assert main(["grade", "--list"]) == 0
    out = capsys.readouterr().out
    for needle in ("transformer_decoder(X, enc_out", "DecoderBlock(d, H, d_ff)",
                   "greedy_decode(model, src, src_mask, max_len, start_symbol)",
                   "numpy_pe(pos, d)", "judged: exact", "black-box properties",
                   f"{len(MISTAKES)} named mistakes"):
        assert needle in out
    assert main(["grade", "--list", "--exercise", "004"]) == 0
    assert "transformer_decoder" not in capsys.readouterr().out


def test_class_set_json_and_exit_status(tmp_path, capsys):
    wrong = tmp_path / "wrong.py"
    wrong.write_text((FIXTURES / "correct_mha.py").read_text().replace(
        "nn.Linear(d, d_ff), nn.ReLU(), nn.Linear(d_ff, d)",
        "nn.Linear(d, d_ff), nn.Linear(d_ff, d), nn.ReLU()"))
    report = tmp_path / "class.json"
    argv = ["grade", str(FIXTURES / "correct_mha.py"), str(wrong), "--exercise", "004",
            "--json", str(report)]
    assert main(argv) == 1
    out = capsys.readouterr().out
    assert "PASS  " in out and "FAIL  " in out and "1 of 2 files pass" in out
    assert "diagnosis: ReLU is applied after the second linear layer" in out
    doc = json.loads(report.read_text())
    assert [f["passed"] for f in doc["files"]] == [True, False]
    (block,) = [i for i in doc["files"][1]["items"] if i["item"] == "DecoderBlock"]
    assert block["status"] == "FAIL" and block["diagnoses"][0]["mistake"] == "relu_after_output"
    assert main(["grade", str(FIXTURES / "correct_mha.py"), "--exercise", "004",
                 "--summary"]) == 0
    assert capsys.readouterr().out.strip().startswith("PASS")


def test_usage_errors_are_one_line(capsys):
    assert main(["grade"]) == 2
    assert "give at least one FILE" in capsys.readouterr().err
    assert main(["grade", "no/such/file.py"]) == 2
    assert "FILE no/such/file.py does not exist" in capsys.readouterr().err
    assert main(["grade", "--exercise", "003", "x.py"]) == 2


def test_a_file_that_is_not_a_regular_file_is_named_for_what_it_is(tmp_path, capsys):
    """A folder or a named pipe (which would block the grader) is one line saying what it is,
    before any file is graded; never "no such file" for a path that exists."""
    fifo = tmp_path / "pipe.py"
    os.mkfifo(fifo)
    for path, kind in ((tmp_path, "is a directory"), (fifo, "is a named pipe")):
        assert main(["grade", str(FIXTURES / "correct_mha.py"), str(path)]) == 2
        captured = capsys.readouterr()
        assert captured.out == ""
        assert captured.err.strip().splitlines() == [
            f"decoderkit grade: error: FILE {path} {kind}, not a regular file"]


def test_a_damaged_notebook_stops_the_run_before_any_grading(tmp_path, capsys):
    bad = tmp_path / "bad.ipynb"
    bad.write_text("{not json")
    assert main(["grade", str(FIXTURES / "correct_mha.py"), str(bad)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""  # nothing graded: the class set is refused as a whole
    (line,) = captured.err.strip().splitlines()
    assert line.startswith(f"decoderkit grade: error: {bad}: not a notebook")


def test_json_never_replaces_the_graded_file_or_any_file_of_the_users(tmp_path, capsys):
    source = tmp_path / "mine.py"
    source.write_text("# check: decoderkit grade mine.py --json report.json\n"
                      + (FIXTURES / "correct_mha.py").read_text())
    notes = tmp_path / "notes.json"
    notes.write_text('{"mine": "decoderkit grade"}')
    before = source.read_bytes()
    for target, message in ((source, "is the file being graded"),
                            (f"{tmp_path}/./mine.py", "is the file being graded"),
                            (notes, "not written by decoderkit grade")):
        assert main(["grade", str(source), "--exercise", "004", "--json", str(target)]) == 2
        err = capsys.readouterr()
        assert "--json" in err.err and message in err.err
        assert err.out == ""  # refused before grading anything
    assert source.read_bytes() == before and notes.read_text() == '{"mine": "decoderkit grade"}'
    report = tmp_path / "report.json"
    for _ in range(2):  # its own earlier report: replaced
        assert main(["grade", str(source), "--exercise", "004", "--json", str(report)]) == 0
        assert json.loads(report.read_text())["written_by"] == "decoderkit grade output file"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.py", "notes.json", "report.json"]
