"""A Jupyter notebook as the grader runs it: its code cells in order, top to bottom, as
"Run All" would, with the lines only IPython understands left out and listed.

Left out (each listed once in the report): line magics (``%matplotlib inline``), shell lines
(``!pip install ...``, ``files = !ls``), help lines (``obj?``), cell magics (``%%bash``: the
whole cell; ``%%time``, ``%%timeit`` and ``%%capture`` only time or capture their body, which
runs). A left-out line becomes ``pass`` at its indentation, so the cell's line numbers stay
those the learner sees. The notebook's own ``grade(...)`` cells (and the import of ``grade``)
are not run: the whole notebook is being graded already.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from decoderkit.base.errors import UsageError
from decoderkit.base.files import TEXT_BYTES
from decoderkit.base.text import read_file

BODY_MAGICS = ("time", "timeit", "capture")  # cell magics whose body runs as plain Python
SHELL_ASSIGN = re.compile(r"^\s*[\w.]+\s*=\s*[!%]")  # files = !ls, t = %timeit -o f()
HELP = re.compile(r"^\s*(\?{1,2}\s*[\w.]+|[\w.]+\s*\?{1,2})\s*$")  # ?obj, obj?, obj??
LABEL_CHARS = 60  # characters of a cell's first line shown in the report


@dataclass(frozen=True)
class Cell:
    """One code cell, ready to run."""

    number: int  # 1-based position among all the notebook's cells, as the learner counts
    first_line: str  # its first non-blank line, shortened
    source: str  # plain Python: IPython lines replaced by ``pass``
    defines: frozenset[str]  # top-level names it binds (def, class, assignment, import)

    @property
    def label(self) -> str:
        """The name its code is compiled under: errors then say 'cell 3, line 2'."""
        return f"cell {self.number}"


@dataclass
class Notebook:
    """A notebook's code cells and the IPython lines left out of them."""

    path: str
    cells: list[Cell] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # "cell 1: %matplotlib inline"

    def sources(self) -> list[tuple[str, str]]:
        """(label, code) per code cell, in order: what the child runs."""
        return [(c.label, c.source) for c in self.cells]

    def defined_in(self, names: list[str]) -> dict[str, str]:
        """name -> 'cell 3: first line' of the last cell that defines it (the one in force
        after Run All)."""
        where = {}
        for cell in self.cells:
            for name in names:
                if name.split(".")[0] in cell.defines:  # GPT.generate: where GPT is
                    where[name] = f"{cell.label}: {cell.first_line}"
        return where


def read_notebook(path: str | Path) -> Notebook:
    """The notebook at ``path`` (read with nbformat, any version it converts to 4), or a
    one-line UsageError: not a regular file of at most ``TEXT_BYTES``, not JSON, nested too
    deeply, not a notebook, an nbformat it cannot read, no code."""
    path = Path(path)
    data = read_file(path, "the notebook", TEXT_BYTES)
    try:
        with warnings.catch_warnings():  # e.g. cells without ids: harmless, not ours to fix
            warnings.simplefilter("ignore")
            nb = nbformat.reads(data.decode("utf-8"), as_version=4)
            nbformat.validate(nb)
    except RecursionError:  # JSON (its metadata, say) nested past Python's recursion limit
        raise UsageError(f"{path}: not a notebook nbformat can read (its JSON is nested too "
                         "deeply: a damaged or hostile file)") from None
    except UnicodeDecodeError as err:
        raise UsageError(f"{path}: not a notebook (not UTF-8 text: byte {err.start})") from None
    except nbformat.ValidationError as err:
        raise UsageError(f"{path}: not a valid notebook: {_one_line(err.message)}") from None
    except (ValueError, nbformat.NBFormatError, KeyError, TypeError,
            AttributeError) as err:  # nbformat's reader raises these on damaged JSON
        raise UsageError(f"{path}: not a notebook nbformat can read: "
                         f"{_one_line(str(err)) or type(err).__name__}") from None
    notebook, grade_names = Notebook(str(path)), set()
    for number, cell in enumerate(nb.cells, start=1):
        if cell.cell_type != "code" or not cell.source.strip():
            continue
        source, skipped = python_source(cell.source, grade_names)
        notebook.skipped += [f"cell {number}: {line}" for line in skipped]
        if source.strip():
            notebook.cells.append(Cell(number, _first_line(cell.source), source,
                                       frozenset(_defines(source))))
    if not notebook.cells:
        raise UsageError(f"{path}: the notebook has no code to grade "
                         f"({len(nb.cells)} cells, none with Python code)")
    return notebook


def python_source(cell: str, grade_names: set[str] | None = None) -> tuple[str, list[str]]:
    """(the cell as plain Python, the IPython lines left out of it). ``grade_names``: the
    names ``grade`` was imported as in earlier cells (updated with this cell's)."""
    lines = cell.splitlines()
    starts = _statement_starts(cell, len(lines))
    first = next((i for i in starts if lines[i].strip()), None)
    if first is not None and lines[first].lstrip().startswith("%%"):
        magic = lines[first].strip()
        if (magic[2:].split() or [""])[0] not in BODY_MAGICS:
            return "", [f"{magic} (the whole cell)"]
    skipped = []
    for i in starts:
        text = lines[i]
        stripped = text.lstrip()
        if stripped.startswith(("%", "!")) or SHELL_ASSIGN.match(text) or HELP.match(text):
            skipped.append(stripped.rstrip())
            lines[i] = text[:len(text) - len(stripped)] + "pass"
    names = set() if grade_names is None else grade_names
    return _without_grade_calls("\n".join(lines) + "\n", names), skipped


def _statement_starts(source: str, count: int) -> list[int]:
    """0-based indexes of the lines that start a statement: not inside brackets or a
    multi-line string, not after a backslash. Every line when the cell cannot be tokenized."""
    inside, depth, ended, last_line = set(), 0, True, 0
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            (start, _), (end, _) = tok.start, tok.end
            if start > last_line and (depth > 0 or not ended):
                inside.add(start)
            inside.update(range(start + 1, end + 1))  # the lines a string token spans
            if tok.type == tokenize.OP and tok.string in "([{":
                depth += 1
            elif tok.type == tokenize.OP and tok.string in ")]}":
                depth = max(0, depth - 1)
            ended = tok.type in (tokenize.NEWLINE, tokenize.NL, tokenize.INDENT,
                                 tokenize.DEDENT, tokenize.COMMENT)
            last_line = end
    except (tokenize.TokenError, SyntaxError):
        pass  # an unclosed bracket or string: the child reports the syntax error
    return [i for i in range(count) if i + 1 not in inside]


def _without_grade_calls(source: str, names: set[str]) -> str:
    """The cell without ``from decoderkit.grade import grade`` and top-level ``grade(...)``
    statements (each replaced by ``pass`` and blank lines: line numbers kept)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return source  # the child reports it, with its cell and line
    drop = []
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                "decoderkit.grade"):
            names |= {a.asname or a.name for a in node.names}
            drop.append(node)
        elif isinstance(node, (ast.Expr, ast.Assign)) and isinstance(node.value, ast.Call) \
                and isinstance(node.value.func, ast.Name) and node.value.func.id in names:
            drop.append(node)
    lines = source.splitlines()
    for node in drop:
        if all(other is node or other.end_lineno < node.lineno or other.lineno > node.end_lineno
               for other in tree.body):  # alone on its lines (no "a = 1; grade(f)")
            lines[node.lineno - 1:node.end_lineno] = ["pass"] + [""] * (
                node.end_lineno - node.lineno)
    return "\n".join(lines) + "\n"


def _defines(source: str) -> set[str]:
    """The top-level names a cell binds (nothing when it does not parse)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return names


def _first_line(source: str) -> str:
    line = next(x.strip() for x in source.splitlines() if x.strip())
    return line if len(line) <= LABEL_CHARS else line[:LABEL_CHARS - 3] + "..."


def _one_line(text: str) -> str:
    return " ".join(text.split())[:300]
