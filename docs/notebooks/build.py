"""Write the course notebooks: each as a blank copy for learners (docs/notebooks/NAME.ipynb)
and a solutions copy (docs/notebooks/solutions/NAME.ipynb), from the cells of course.py,
course_transfer.py and course_llama.py.

    python docs/notebooks/build.py

A cell is ("md", text), ("code", text), ("exercise", solution, blank) or ("grade", code):
grade cells carry the tag "grade" (the test suite checks each one's report).
"""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import course  # noqa: E402
import course_llama  # noqa: E402
import course_transfer  # noqa: E402

NOTEBOOKS = {**course.NOTEBOOKS, **course_transfer.NOTEBOOKS, **course_llama.NOTEBOOKS}


def build(cells: list[tuple], solved: bool) -> nbformat.NotebookNode:
    out = []
    for kind, *text in cells:
        if kind == "md":
            out.append(new_markdown_cell(text[0].strip()))
        elif kind == "exercise":
            out.append(new_code_cell((text[0] if solved else text[1]).strip(),
                                     metadata={"tags": ["exercise"]}))
        else:
            out.append(new_code_cell(text[0].strip(),
                                     metadata={"tags": ["grade"]} if kind == "grade" else {}))
    nb = new_notebook(cells=out)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    return nb


def main() -> None:
    (HERE / "solutions").mkdir(exist_ok=True)
    for name, cells in NOTEBOOKS.items():
        nbformat.write(build(cells, False), HERE / f"{name}.ipynb")
        nbformat.write(build(cells, True), HERE / "solutions" / f"{name}.ipynb")


if __name__ == "__main__":
    main()
