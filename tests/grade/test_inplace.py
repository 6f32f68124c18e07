"""``grade(obj)`` as a notebook calls it: the cells run here in a namespace of their own, as
IPython runs them (each cell's source in linecache, the input history in ``_ih``)."""

import linecache

import pytest
import torch

from decoderkit.base.errors import UsageError
from decoderkit.grade import grader, inplace


def _notebook(*cells: str) -> dict:
    """Run ``cells`` as IPython would: each under its own file name, kept in linecache."""
    ns = {"__name__": "__main__", "_ih": [""]}
    for n, code in enumerate(cells, start=1):
        name = f"/tmp/ipykernel_test/cell{n}_{abs(hash(code))}.py"
        linecache.cache[name] = (len(code), None, code.splitlines(True), name)
        ns["_ih"].append(code)
        exec(compile(code, name, "exec"), ns)
    return ns


CELLS = (
    "import numpy as np\nimport math as m\nfrom dataclasses import dataclass\nBASE = 10000.0\n"
    "TABLE = np.zeros(3)\n",
    "@dataclass\nclass Cfg:\n    base: float = BASE\n",
    "def _angles(pos, d, cfg):\n    return np.asarray(pos, float)[:, None] * "
    "cfg.base ** (-np.arange(0, d, 2) / d)\n",
    "# the exercise\nx = 1\n\ndef numpy_pe(pos, d):\n    a = _angles(pos, d, Cfg())\n"
    "    assert m.pi > 3\n    return np.stack([np.sin(a), np.cos(a)], -1).reshape(len(pos), d)\n",
)


def test_gather_sends_the_source_and_what_it_uses():
    ns = _notebook(*CELLS)
    sources, notes = inplace.gather([ns["numpy_pe"]], ns)
    labels = [label for label, _ in sources]
    assert labels[0] == "<imports>" and labels[-1] == "Cell In[4]"  # dependencies first
    assert sorted(labels[1:3]) == ["Cell In[2]", "Cell In[3]"]
    header = sources[0][1]
    assert "import numpy as np\n" in header and "import math as m\n" in header
    assert "from dataclasses import dataclass as dataclass\n" in header
    assert "BASE = 10000.0\n" in header and "TABLE" not in header and notes == []
    code = dict(sources)["Cell In[4]"]
    assert code.splitlines()[3] == "def numpy_pe(pos, d):"  # the cell's own line numbers
    assert "x = 1" not in code  # only the definition, not the rest of its cell
    space = {}
    for label, piece in sources:  # what the child runs, in order
        exec(compile(piece, label, "exec"), space)
    assert space["numpy_pe"]([0, 1], 4).shape == (2, 4)


def test_names_that_cannot_be_sent_are_noted():
    ns = _notebook("import torch\nW = torch.ones(2)\n", "def numpy_pe(pos, d):\n    return W\n")
    _, notes = inplace.gather([ns["numpy_pe"]], ns)
    assert notes and notes[0].startswith("W (a Tensor) is used but was not sent")


def test_grade_runs_in_the_child_and_reports():
    ns = _notebook(*CELLS, "from decoderkit.grade import grade\nreport = grade(numpy_pe)\n")
    report = ns["report"]
    assert report.passed, repr(report)
    assert "pass       000  numpy_pe" in repr(report)
    page = report._repr_html_()
    assert page.startswith("<table>") and "<code>numpy_pe</code>" in page and ">pass<" in page


def test_the_report_says_when_the_sandbox_is_off(monkeypatch):
    from decoderkit.grade.run import bwrap

    ns = _notebook(*CELLS, "from decoderkit.grade import grade\nreport = grade(numpy_pe)\n")
    assert not any("sandbox" in n for n in ns["report"].notes) or bwrap.unusable()
    monkeypatch.setattr(bwrap, "unusable", lambda: "turned off by the test")
    ns = _notebook(*CELLS, "from decoderkit.grade import grade\nreport = grade(numpy_pe)\n")
    report = ns["report"]
    assert report.passed and report.notes == [
        "the grader's sandbox is off (turned off by the test); learner code runs with time and "
        "resource limits only, and can read your files and reach the network: install it "
        "with: apt-get install bubblewrap"]
    assert repr(report).splitlines()[-1].startswith("  note: the grader's sandbox is off")
    assert "sandbox is off" in report._repr_html_()


def test_wrong_and_unwritten_exercises():
    wrong = CELLS[3].replace("np.sin(a), np.cos(a)", "np.cos(a), np.sin(a)")
    ns = _notebook(*CELLS[:3], wrong, "def my_pe(pos, d):\n    raise NotImplementedError\n",
                   "from decoderkit.grade import grade\nwrong = grade(numpy_pe)\n"
                   "blank = grade(my_pe, item='numpy_pe')\n")
    (outcome,) = ns["wrong"].outcomes
    assert outcome.status == "FAIL" and outcome.diagnoses[0][0] == "pe_swapped"
    report = ns["blank"]
    assert "not implemented" in repr(report) and "Traceback" not in repr(report)
    assert "not implemented" in report._repr_html_()


def test_bad_calls_are_one_line():
    ns = _notebook(*CELLS)
    with pytest.raises(UsageError, match="no gradable item named _angles"):
        inplace.grade(ns["_angles"])
    with pytest.raises(UsageError, match="takes your functions and classes"):
        inplace.grade(torch.ones(1))
    with pytest.raises(UsageError, match="needs what to grade"):
        inplace.grade()


def test_companions_go_with_their_seeds_items_only():
    ns = _notebook("from dataclasses import dataclass\n@dataclass\nclass GPTConfig:\n"
                   "    n_embd: int = 16\n", "GPT = 1\n")
    by_name = {i.name: i for i in grader.ITEMS}
    assert inplace.companions((by_name["GPT"],), ns) == (ns["GPTConfig"],)
    assert inplace.companions((by_name["transformer_decoder"],), ns) == ()
    assert inplace.companions((by_name["GPT"],), {"GPTConfig": 3}) == ()  # not a class
