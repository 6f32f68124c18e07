"""``decoderkit bench``: run a script of ``benchmarks/`` with this Python."""

from __future__ import annotations

import argparse
import ast
import subprocess
import sys
from pathlib import Path

from decoderkit.base.errors import UsageError
from decoderkit.cli.args import text


def benchmarks_dir() -> Path:
    """The ``benchmarks/`` folder of the source checkout this package runs from."""
    return Path(__file__).resolve().parents[3] / "benchmarks"


def is_script(tree: ast.Module) -> bool:
    """A benchmark is a script (``if __name__ == "__main__":`` at its top level); the modules
    beside them (``bible_peers``, ``transfer_items``) are what scripts import."""
    return any(isinstance(node, ast.If) and ast.unparse(node.test).replace("'", '"')
               == '__name__ == "__main__"' for node in tree.body)


def add(sub) -> None:
    """The subcommand: a benchmark name and the arguments passed to its script."""
    p = sub.add_parser("bench", help="run a benchmark script from benchmarks/",
                       description="Run benchmarks/NAME.py with this Python; arguments after "
                       "NAME are passed to the script (e.g. 'decoderkit bench generate --quick').")
    p.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    p.add_argument("name", nargs="?", type=text, help="benchmark name (see --list)")
    p.add_argument("script_args", nargs=argparse.REMAINDER, metavar="...",
                   help="arguments passed to the script")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """List the scripts, or run one and return its exit status."""
    folder = benchmarks_dir()
    trees = {p.stem: (p, ast.parse(p.read_text())) for p in sorted(folder.glob("*.py"))} \
        if folder.is_dir() else {}
    scripts = {name: path for name, (path, tree) in trees.items() if is_script(tree)}
    if not scripts:
        raise UsageError(f"no benchmark scripts in {folder} (run from a source checkout)")
    if args.list:
        for name in scripts:
            doc = ast.get_docstring(trees[name][1]) or ""
            print(f"{name:<16}{doc.splitlines()[0] if doc else ''}")
        return 0
    if args.name not in scripts:
        what = "name a benchmark" if args.name is None else f"unknown benchmark {args.name!r}"
        raise UsageError(f"{what}; choose from {list(scripts)} (or --list)")
    return subprocess.call([sys.executable, str(scripts[args.name]), *args.script_args])
