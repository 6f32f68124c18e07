"""``grade(obj)``: grade what a learner just defined, from inside their notebook.

The objects' source (``inspect``, or the notebook's input history where ``inspect`` cannot
see a class) is sent with what it depends on in the notebook's namespace: the modules it
uses (as imports), the learner's other functions and classes it calls (their source, in
turn), plain constants (their ``repr``). It runs in the same limited child process as a
file (in bubblewrap's sandbox where usable; else the report's notes say so); nothing of the
learner's runs in the notebook's process. The report shows as a table in Jupyter
(``_repr_html_``) and as the command's text elsewhere.
"""

from __future__ import annotations

import ast
import builtins
import html
import inspect
import sys
import textwrap
import types
from pathlib import Path

import torch

from decoderkit.base.errors import UsageError
from decoderkit.grade import grader
from decoderkit.grade.judge.catalogue import BY_NAME
from decoderkit.grade.run import bwrap
from decoderkit.grade.run.notebook import python_source
from decoderkit.grade.run.sandbox import run_child
from decoderkit.grade.seeds import BY_SEED

LITERAL_CHARS = 10_000  # a constant longer than this as text is not sent


def grade(*objects, item: str | None = None, exercise: str | None = None) -> Report:
    """Grade functions/classes defined in this notebook (or any module) by their names,
    e.g. ``grade(transformer_decoder)``; ``item=`` grades one object under an item's name
    (``grade(my_block, item="DecoderBlock")``)."""
    if not objects:
        raise UsageError("grade() needs what to grade, e.g. grade(transformer_decoder)")
    if item is not None and len(objects) != 1:
        raise UsageError(f"item={item!r} names one object, got {len(objects)}")
    for obj in objects:
        if not inspect.isfunction(obj) and not inspect.isclass(obj):
            raise UsageError(f"grade() takes your functions and classes, got "
                             f"{type(obj).__name__} {obj!r:.60}")
    names = [item] if item else [_item_name(obj) for obj in objects]
    objects = tuple(_owner(obj) for obj in objects)  # a method goes with its class
    items = tuple(i for i in grader.select(exercise) if i.name in names)
    unknown = [n for n in names if n not in {i.name for i in items}]
    if unknown:
        known = sorted({i.name for i in grader.select(exercise)})
        raise UsageError(f"no gradable item named {', '.join(unknown)}; the items are "
                         f"{', '.join(known)} (or pass item='NAME')")
    caller = inspect.currentframe().f_back.f_globals
    objects += companions(items, caller)
    sources, notes = gather(objects, caller)
    if bwrap.note() is not None:  # the one line `decoderkit grade` prints, in the report here
        notes.append(bwrap.note().removeprefix("note: "))
    if item is not None and _item_name(objects[0]) != item:
        sources.append(("<grade>", f"{item} = {objects[0].__name__}\n"))
    calls, inputs, judges = grader.plan(items)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # judging runs thousands of tiny ops: extra threads only spin
    try:
        run = run_child(Path("<notebook>"), calls, inputs.tensors, names, sources=sources)
        report = grader.verdicts(items, judges, run, f"grade({', '.join(names)})")
    finally:
        torch.set_num_threads(threads)
    return Report(report, notes)


def companions(items, caller: dict) -> tuple[type, ...]:
    """The classes the items' seeds build their modules from (``Seed.companions``: Week 3's
    ``GPTConfig``), as the caller's namespace defines them."""
    names = dict.fromkeys(n for seed in dict.fromkeys(i.seed for i in items)
                          for n in BY_SEED[seed].companions)
    return tuple(caller[n] for n in names if inspect.isclass(caller.get(n)))


def _item_name(obj) -> str:
    """'transformer_decoder', or 'GPT.generate' for a method (its qualified name)."""
    return obj.__qualname__ if "<" not in obj.__qualname__ else obj.__name__


def _owner(obj):
    """The class a method was defined in (looked up in its module), else ``obj`` itself."""
    head = obj.__qualname__.split(".")[0]
    if inspect.isfunction(obj) and "." in obj.__qualname__ and "<" not in obj.__qualname__:
        owner = inspect.unwrap(obj).__globals__.get(head)  # under @torch.no_grad() too
        if inspect.isclass(owner):
            return owner
    return obj


def gather(objects, caller: dict) -> tuple[list[tuple[str, str]], list[str]]:
    """(label, code) pieces that define ``objects`` and what they use, dependencies first:
    imports and constants, then each definition; and notes on names that could not be sent."""
    header: dict[str, str] = {}  # name -> its import or assignment line
    defs: list[tuple[str, str]] = []
    notes: list[str] = []
    seen: set[int] = set()

    def visit(obj) -> None:
        if id(obj) in seen:
            return
        seen.add(id(obj))
        space = _namespace(obj, caller)
        label, code = definition(obj, space)
        for name in sorted(free_names(code)):
            if name in space and name not in header and space[name] is not obj:
                _send(name, space[name], space, header, visit, notes)
        defs.append((label, code))

    for obj in objects:
        visit(obj)
    return [("<imports>", "".join(f"{line}\n" for line in header.values()))] + defs, notes


def _send(name: str, value, space: dict, header: dict, visit, notes: list[str]) -> None:
    """How the child gets ``name``: an import, a constant, or the learner's own definition."""
    if isinstance(value, types.ModuleType):
        if value.__name__ != "__main__":
            module = value.__name__
            header[name] = f"import {module}" if module == name else f"import {module} as {name}"
        return
    module = getattr(value, "__module__", None)
    if (inspect.isfunction(value) or inspect.isclass(value)) and module == space.get("__name__"):
        visit(value)  # the learner's own: its source goes too
        return
    if _importable(value):
        header[name] = f"from {module} import {value.__qualname__} as {name}"
        return
    text = repr(value)
    try:
        literal = len(text) <= LITERAL_CHARS and ast.literal_eval(text) == value
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        literal = False
    if literal:
        header[name] = f"{name} = {text}"
    else:
        notes.append(f"{name} (a {type(value).__name__}) is used but was not sent: only "
                     f"modules, functions, classes and plain constants are; define it inside, "
                     f"or pass it as an argument")


def _importable(value) -> bool:
    """True when ``from value.__module__ import value.__qualname__`` gives ``value`` back."""
    module = sys.modules.get(getattr(value, "__module__", None) or "")
    if module is None or module.__name__ == "__main__" or not hasattr(value, "__qualname__"):
        return False
    found = module
    for part in value.__qualname__.split("."):
        found = getattr(found, part, None)
    return found is value


def _namespace(obj, caller: dict) -> dict:
    """Where the names in ``obj``'s source are looked up: its module's globals."""
    methods = [getattr(m, "__func__", m) for m in vars(obj).values()] if inspect.isclass(
        obj) else [obj]
    own = [f.__globals__ for f in methods if inspect.isfunction(f)  # not those @dataclass
           and f.__code__.co_filename != "<string>"  # wrote, nor its wrappers
           and f.__globals__.get("__name__") == obj.__module__]
    if own:
        return own[0]
    module = sys.modules.get(obj.__module__)
    if obj.__module__ == caller.get("__name__") or module is None:
        return caller
    return vars(module)


def definition(obj, space: dict) -> tuple[str, str]:
    """(label, source) of a function or class, its line numbers those of where it was
    written (leading blank lines): errors then point at the learner's own line."""
    history = _history(space)
    try:
        lines, start = inspect.getsourcelines(obj)
        code, filename = textwrap.dedent("".join(lines)), inspect.getsourcefile(obj) or ""
    except (OSError, TypeError):  # a class in a notebook: Python cannot find its cell
        found = _from_history(obj.__name__, history)
        if found is None:
            raise UsageError(f"cannot find the source of {obj.__name__}: define it in a "
                             f"notebook cell or a .py file") from None
        return found
    cell = next((n for n in range(len(history) - 1, 0, -1) if code.strip() in history[n]),
                None)
    label = f"Cell In[{cell}]" if cell else (filename or f"the source of {obj.__name__}")
    if cell:
        start = _line_in(history[cell], code)
    return label, "\n" * (start - 1) + code


def _history(caller: dict) -> list[str]:
    """IPython's input history (``In``: cell sources by execution count), or nothing."""
    history = caller.get("_ih", caller.get("In"))
    return list(history) if isinstance(history, list) else []


def _from_history(name: str, history: list[str]) -> tuple[str, str] | None:
    """The last executed cell that defines ``name`` at top level: (label, its code)."""
    for n in range(len(history) - 1, 0, -1):
        code = python_source(history[n])[0]
        try:
            tree = ast.parse(code)
        except SyntaxError:
            continue
        for node in tree.body:
            if isinstance(node, (ast.ClassDef, ast.FunctionDef)) and node.name == name:
                first = min([node.lineno] + [d.lineno for d in node.decorator_list])
                lines = code.splitlines()[first - 1:node.end_lineno]
                return f"Cell In[{n}]", "\n" * (first - 1) + "\n".join(lines) + "\n"
    return None


def _line_in(cell: str, code: str) -> int:
    """The 1-based line of ``cell`` where ``code`` begins."""
    return cell[:cell.index(code.strip())].count("\n") + 1


def free_names(code: str) -> set[str]:
    """Names ``code`` reads but never binds itself (nor are builtins)."""
    tree = ast.parse(code)
    loads, stores = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (loads if isinstance(node.ctx, ast.Load) else stores).add(node.id)
        elif isinstance(node, ast.arg):
            stores.add(node.arg)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            stores |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node not in tree.body:
            stores.add(node.name)
    return loads - stores - set(dir(builtins))


class Report:
    """A grade(...) result: a table in Jupyter, the command's text report elsewhere."""

    def __init__(self, report: grader.FileReport, notes: list[str]):
        self.report, self.notes = report, notes

    @property
    def passed(self) -> bool:
        return self.report.passed

    @property
    def outcomes(self):
        return self.report.outcomes

    def __repr__(self) -> str:
        text = grader.format_report(self.report)
        return "\n".join([text] + [f"  note: {n}" for n in self.notes])

    def _repr_html_(self) -> str:
        rows = []
        for o in self.report.outcomes:
            diagnosis = ""
            if o.diagnoses:
                m = BY_NAME[o.diagnoses[0][0]]
                diagnosis = (f"<b>{html.escape(m.title)}</b><br>{html.escape(m.explanation)}"
                             f"<br><code>{html.escape(m.formula)}</code> (seed {m.source})")
            detail = "<br>".join(html.escape(t) for t in [o.detail] + o.notes if t)
            color = {"pass": "#1a7f37", "FAIL": "#cf222e"}.get(o.status, "#6e7781")
            rows.append(f"<tr><td><code>{html.escape(o.item)}</code></td><td>{o.seed}</td>"
                        f"<td style='color:{color}'><b>{html.escape(o.status)}</b></td>"
                        f"<td style='text-align:left'>{detail}</td>"
                        f"<td style='text-align:left'>{diagnosis}</td></tr>")
        extra = [self.report.problem] if self.report.problem else []
        foot = "".join(f"<p>{html.escape(t)}</p>" for t in extra + self.notes)
        return ("<table><thead><tr><th>item</th><th>seed</th><th>verdict</th>"
                "<th>what happened</th><th>diagnosis</th></tr></thead><tbody>"
                + "".join(rows) + f"</tbody></table>{foot}"
                f"<p><b>{html.escape(self.report.summary())}</b></p>")
