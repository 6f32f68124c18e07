"""The manuals stay true: every ``decoderkit ...`` command line in README.md and docs/*.md
parses with the real parser (a real subcommand, real flags, accepted values), every Python
block imports, every relative link and anchor resolves, and the README stays a short front
door linking every manual and naming every make target.

Command lines come from shell blocks (```bash, ```sh or no language; ``$ `` lines of
```console, ```text and other blocks) with backslash continuations joined, pipes, ``;``/``&&`` and
redirections split off, ``python -m decoderkit`` and ``torchrun ... -m decoderkit`` included;
``[--flag value]`` is an optional part, parsed with the rest. A line with a ``...`` word is a
sketch: only its subcommand and flag names are checked, as for `decoderkit ...` in inline code.
A Python block runs its import statements only, or whole when the line before its fence is
``<!-- docs-test: run -->`` (kept for blocks that are cheap and need no files).
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import io
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest

from decoderkit.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
MANUALS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
README_MAX_LINES = 250
RUN_MARK = "<!-- docs-test: run -->"
SHELL = {"", "bash", "sh", "shell", "zsh"}  # every line a command; others: only "$ " lines
SEPARATORS = {"|", "||", "&&", ";", "&"}
REDIRECTS = {"<", ">", ">>", "2>", "2>&1"}


@dataclass(frozen=True)
class Block:
    """One fenced code block: its file, the line of its first content line, language, text,
    and whether it is marked to run whole."""

    file: Path
    line: int
    lang: str
    text: str
    run: bool


def blocks(file: Path) -> list[Block]:
    """Every fenced (```) block of a Markdown file."""
    found, lines = [], file.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        fence = re.match(r"\s*```(\S*)", lines[i])
        if not fence:
            i += 1
            continue
        start, body = i + 1, []
        i += 1
        while i < len(lines) and not lines[i].strip().startswith("```"):
            body.append(lines[i])
            i += 1
        marked = start >= 2 and lines[start - 2].strip() == RUN_MARK
        found.append(Block(file, start + 1, fence.group(1).lower(), "\n".join(body), marked))
        i += 1
    return found


def shell_lines(block: Block) -> list[tuple[int, str]]:
    """(line number, logical line) of a shell block, continuations joined; of a text block,
    the ``$ `` lines without the prompt."""
    out, pending, first = [], "", 0
    for n, raw in enumerate(block.text.splitlines(), start=block.line):
        if block.lang not in SHELL:
            if raw.startswith("$ "):
                out.append((n, raw[2:]))
            continue
        if not pending:
            first = n
            raw = raw[2:] if raw.startswith("$ ") else raw
        if raw.rstrip().endswith("\\"):
            pending += raw.rstrip()[:-1] + " "
            continue
        out.append((first, pending + raw))
        pending = ""
    return out


def commands(line: str) -> list[list[str]]:
    """The decoderkit argument lists in one shell line (after ``decoderkit``)."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars="|&;<>")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    words, found, segment, skip = list(lexer), [], [], False
    for word in [*words, ";"]:
        if skip:
            skip = False
        elif word in REDIRECTS:
            skip = True
        elif word in SEPARATORS:
            argv = decoderkit_argv(segment)
            if argv is not None:
                found.append(argv)
            segment = []
        else:
            segment.append(word)
    return found


def decoderkit_argv(words: list[str]) -> list[str] | None:
    """The arguments after ``decoderkit`` (or ``-m decoderkit``), None if not a decoderkit
    command; ``[`` and ``]`` of optional parts dropped."""
    for i, word in enumerate(words):
        if Path(word).name == "decoderkit" and (i == 0 or words[i - 1] == "-m"):
            rest = [w.strip("[]") for w in words[i + 1:]]
            return [w for w in rest if w]
        if i == 0 and Path(word).name not in ("python", "python3", "torchrun"):
            return None
    return None


def inline_commands(file: Path) -> list[tuple[int, list[str]]]:
    """`decoderkit ...` spans of prose (outside fences) whose subcommand is not a
    placeholder (``decoderkit COMMAND``)."""
    found, fenced = [], False
    for n, line in enumerate(file.read_text(encoding="utf-8").splitlines(), start=1):
        if line.strip().startswith("```"):
            fenced = not fenced
            continue
        if fenced:
            continue
        for span in re.findall(r"`(decoderkit [^`]+)`", line):
            words = span.split()[1:]
            if words and not words[0].isupper():
                found.append((n, [w.strip("[]") for w in words if w.strip("[]")]))
    return found


def subparser(parser: argparse.ArgumentParser, argv: list[str]):
    """(the parser of the (sub)command ``argv`` names, the words after it); a word naming no
    subcommand is an AssertionError listing the real ones."""
    words = list(argv)
    while True:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs or not words or words[0].startswith("-"):
            return parser, words
        choices = subs[0].choices
        assert words[0] in choices, f"{words[0]!r} is not a subcommand of {parser.prog}: " \
                                    f"{sorted(choices)}"
        parser, words = choices[words[0]], words[1:]


def check_flags(argv: list[str]) -> None:
    """The subcommand exists and every ``--flag`` word is one of its options (up to the
    script name of a command that hands the rest to a script)."""
    parser, words = subparser(build_parser(), argv)
    known = {s for a in parser._actions for s in a.option_strings}
    if any(a.nargs == argparse.REMAINDER for a in parser._actions):  # bench: the script's own
        words = words[:next((i for i, w in enumerate(words) if not w.startswith("-")),
                            len(words))]
    for word in words:
        flag = word.split("=", 1)[0]
        if flag.startswith("--") and flag != "--":
            assert flag in known, f"{parser.prog} has no flag {flag}: {sorted(known)}"


def check_parses(argv: list[str]) -> None:
    """The whole argument list parses (``--help`` included), or an AssertionError with
    argparse's message."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            build_parser().parse_args(argv)
    except SystemExit as stop:
        assert stop.code == 0, err.getvalue().strip()


def where(file: Path, line: int) -> str:
    """``docs/x.md:12``: a test id."""
    return f"{file.relative_to(ROOT)}:{line}"


SHELL_CASES = [pytest.param(argv, id=where(b.file, n))
               for file in MANUALS for b in blocks(file)
               for n, line in shell_lines(b) for argv in commands(line)]
INLINE_CASES = [pytest.param(argv, id=where(file, n))
                for file in MANUALS for n, argv in inline_commands(file)]
PYTHON_CASES = [pytest.param(b, id=where(b.file, b.line))
                for file in MANUALS for b in blocks(file) if b.lang in ("python", "py")]


@pytest.mark.parametrize("argv", SHELL_CASES)
def test_a_documented_command_line_parses(argv):
    check_flags(argv)
    if "..." not in argv:
        check_parses(argv)


@pytest.mark.parametrize("argv", INLINE_CASES)
def test_a_command_named_in_prose_has_its_subcommand_and_flags(argv):
    check_flags([w for w in argv if w != "..."])


@pytest.mark.parametrize("block", PYTHON_CASES)
def test_a_python_block_imports(block, tmp_path, monkeypatch):
    tree = ast.parse(block.text, filename=str(block.file))
    if block.run:
        monkeypatch.chdir(tmp_path)
        exec(compile(tree, where(block.file, block.line), "exec"), {"__name__": "docs"})
        return
    imports = [node for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))]
    module = ast.Module(body=imports, type_ignores=[])
    exec(compile(module, where(block.file, block.line), "exec"), {})


def test_the_manuals_hold_commands_and_code():
    """The collection above found something to check (an extraction bug would pass empty)."""
    assert len(SHELL_CASES) >= 50 and len(INLINE_CASES) >= 20 and len(PYTHON_CASES) >= 8


def test_the_readme_is_short_and_links_every_manual():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= README_MAX_LINES
    missing = [f.name for f in MANUALS[1:] if f"(docs/{f.name})" not in text]
    assert not missing, f"README.md links no {missing}"


def test_the_readme_names_every_make_target():
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    targets = re.findall(r"^([a-z][a-z0-9-]*):", makefile, flags=re.M)
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    missing = [t for t in targets if f"make {t}" not in readme]
    assert targets and not missing, f"README.md does not name make {missing}"


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(file: Path) -> set[str]:
    """The anchors of a Markdown file's headings (outside fences)."""
    found, fenced = set(), False
    for line in file.read_text(encoding="utf-8").splitlines():
        if line.strip().startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            found.add(slug(line.lstrip("#")))
    return found


@pytest.mark.parametrize("file", MANUALS + [ROOT / "benchmarks" / "README.md",
                                             *sorted((ROOT / "benchmarks" / "log").glob("*.md"))],
                         ids=lambda f: str(f.relative_to(ROOT)))
def test_every_relative_link_and_anchor_resolves(file):
    text = re.sub(r"```.*?```", "", file.read_text(encoding="utf-8"), flags=re.S)
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue  # http:, mailto:
        path, _, anchor = target.partition("#")
        linked = (file.parent / path).resolve() if path else file
        assert linked.exists(), f"{file.name} links {target}: no such file"
        if anchor and linked.suffix == ".md":
            assert anchor in anchors(linked), f"{file.name} links {target}: no such heading"


ARCHITECTURE = ROOT / "docs" / "architecture.md"
SOURCE = ROOT / "src" / "decoderkit"
INDEX = "## Every module"


def module_forms(rel: Path) -> tuple[str, str]:
    """How docs/architecture.md may name a module of ``src/decoderkit/`` (``rel``): its path
    (``generation/lm/rows.py``; a package as its folder, ``generation/lm/``) and its dotted
    path (``generation.lm.rows``)."""
    parts = rel.parts[:-1] if rel.name == "__init__.py" else (*rel.parts[:-1], rel.stem)
    if not parts:
        return "decoderkit/__init__.py", "decoderkit"
    path = "/".join(parts) + "/" if rel.name == "__init__.py" else rel.as_posix()
    return path, ".".join(parts)


def names_module(text: str, rel: Path) -> bool:
    """``text`` names the module: its path or its dotted path, whole (``serve/worker.py`` is
    not named by ``serve/lm/worker.py``, nor ``generation/lm/`` by ``generation/lm/rows.py``),
    with or without ``src/decoderkit/`` or ``decoderkit.`` before it."""
    path, dotted = module_forms(rel)
    before = r"(?<![\w/.])(?:(?:src/)?decoderkit[/.])?"
    return bool(re.search(before + re.escape(path) + r"(?![\w/])", text)
                or re.search(before + re.escape(dotted) + r"(?![\w]|[./]\w)", text))


def test_the_architecture_names_every_module():
    text = ARCHITECTURE.read_text(encoding="utf-8")
    modules = sorted(p.relative_to(SOURCE) for p in SOURCE.rglob("*.py"))
    assert len(modules) >= 150, len(modules)  # the walk found the package
    missing = [rel.as_posix() for rel in modules if not names_module(text, rel)]
    assert not missing, (f"docs/architecture.md names no {missing}: add a line to "
                         f"docs/architecture.md for each (its '{INDEX}' table of the layer: "
                         "the path and what the module holds)")


def test_every_module_the_architecture_lists_exists():
    text = ARCHITECTURE.read_text(encoding="utf-8")
    assert INDEX in text, f"docs/architecture.md has no '{INDEX}' section"
    listed = re.findall(r"^\| `([^`]+)` \|", text.split(INDEX, 1)[1], flags=re.M)
    assert len(listed) >= 150, len(listed)
    gone = [name for name in listed
            if not (SOURCE / name.removeprefix("decoderkit/")).exists()]
    assert not gone, f"docs/architecture.md lists {gone}, which src/decoderkit/ no longer has"
