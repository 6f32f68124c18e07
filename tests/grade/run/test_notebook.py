"""Notebooks as the grader reads them: cells in order, IPython lines left out and listed,
cell numbers in the report, damaged notebooks refused in one line."""

import json
import os

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from decoderkit.base.errors import UsageError
from decoderkit.grade import grader
from decoderkit.grade.run.notebook import python_source, read_notebook

PE = ("def numpy_pe(pos, d):\n"
      "    angle = np.asarray(pos, float)[:, None] * 10000.0 ** (-np.arange(0, d, 2) / d)\n"
      "    return np.stack([np.sin(angle), np.cos(angle)], -1).reshape(len(pos), d)\n")


def _write(tmp_path, cells, name="nb.ipynb"):
    path = tmp_path / name
    nbformat.write(new_notebook(cells=cells), path)
    return path


def test_ipython_lines_become_pass_and_are_listed():
    cell = ("%matplotlib inline\nimport numpy as np\n!pip install x\nfiles = !ls\n"
            "if True:\n    %time y = 1\nhelp_me = '''\n!not shell, inside a string\n'''\n"
            "z = (1,\n     !2)\nnp.sum?\n")
    source, skipped = python_source(cell)
    assert skipped == ["%matplotlib inline", "!pip install x", "files = !ls", "%time y = 1",
                       "np.sum?"]
    lines = source.splitlines()
    assert lines[0] == "pass" and lines[5] == "    pass" and lines[7].startswith("!not")
    assert lines[10] == "     !2)"  # inside brackets: Python's own syntax error, not IPython
    assert len(lines) == len(cell.splitlines())  # line numbers kept


def test_cell_magics():
    assert python_source("%%bash\necho hi\n") == ("", ["%%bash (the whole cell)"])
    assert python_source("%%\nx\n") == ("", ["%% (the whole cell)"])
    source, skipped = python_source("%%time\nx = 1\n")
    assert skipped == ["%%time"] and source == "pass\nx = 1\n"


def test_grade_cells_are_not_run_inside_the_graded_notebook():
    names = set()
    source, _ = python_source("from decoderkit.grade import grade as g\nx = 1\ng(f)\n"
                              "r = g(\n  f)\ny = 2; g(f)\n", names)
    assert source == "pass\nx = 1\npass\npass\n\ny = 2; g(f)\n"
    assert python_source("g(f)\n", names)[0] == "pass\n"  # imported in an earlier cell


def test_a_notebook_is_graded_cell_by_cell(tmp_path):
    path = _write(tmp_path, [
        new_markdown_cell("# positions"),
        new_code_cell("%matplotlib inline\nimport numpy as np"),
        new_code_cell("# my table\n" + PE),
        new_code_cell("from decoderkit.grade import grade\ngrade(numpy_pe)"),
        new_code_cell("numpy_pe?")])
    report = grader.grade_file(path, "000", call_seconds=2, wall_seconds=30)
    assert report.passed, grader.format_report(report)
    assert report.defined == {"numpy_pe": "cell 3: # my table"}
    assert report.skipped == ["cell 2: %matplotlib inline", "cell 5: numpy_pe?"]
    text = grader.format_report(report)
    assert "pass       000  numpy_pe [cell 3: # my table]" in text
    assert "skipped    cell 2: %matplotlib inline" in text
    assert "2 IPython line(s) not run" in report.summary()
    doc = report.to_json()
    assert doc["items"][0]["defined_in"] == "cell 3: # my table"


def test_an_error_names_its_cell_and_says_what_was_skipped(tmp_path):
    path = _write(tmp_path, [new_code_cell("%run helpers.py"),  # would define np
                             new_code_cell("x = 1\n" + PE + "numpy_pe([0], 2)")])
    report = grader.grade_file(path, "000", call_seconds=2, wall_seconds=30)
    assert report.problem.startswith("the file did not run: NameError: name 'np' is not "
                                     "defined (cell 2, line 3)"), report.problem
    assert "may need the IPython lines" in report.problem and not report.passed


@pytest.mark.parametrize("content,expected", [
    ("{not json", "not a notebook nbformat can read"),
    ('{"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [{"cell_type": "code"}]}',
     "not a valid notebook"),
    ('{"nbformat": 99, "nbformat_minor": 0, "cells": []}', "not a notebook nbformat can read"),
    ('[1, 2]', "not a notebook nbformat can read"),
    (b'{"cells": "\xff"}', "not UTF-8"),
    ('{"metadata": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested too deeply"),
])
def test_damaged_notebooks_are_one_line(tmp_path, content, expected):
    path = tmp_path / "bad.ipynb"
    (path.write_bytes if isinstance(content, bytes) else path.write_text)(content)
    with pytest.raises(UsageError, match=expected) as err:
        read_notebook(path)
    assert "\n" not in str(err.value) and str(path) in str(err.value)


def test_a_notebook_that_is_a_pipe_is_refused_unread(tmp_path):
    path = tmp_path / "pipe.ipynb"
    os.mkfifo(path)  # opening it to read would block until a writer comes
    with pytest.raises(UsageError, match="not a regular file|FIFO|pipe") as err:
        read_notebook(path)
    assert str(path) in str(err.value)


def test_a_notebook_without_code(tmp_path):
    path = _write(tmp_path, [new_markdown_cell("# notes"), new_code_cell("   ")])
    with pytest.raises(UsageError, match="no code to grade"):
        read_notebook(path)
    old = tmp_path / "v3.ipynb"  # an nbformat 3 notebook is converted, then read
    old.write_text(json.dumps({"nbformat": 3, "nbformat_minor": 0, "metadata": {},
                               "worksheets": [{"cells": [{"cell_type": "code", "input": PE,
                                                          "outputs": [], "language": "python"}]}]}))
    assert read_notebook(old).cells[0].defines == {"numpy_pe"}
