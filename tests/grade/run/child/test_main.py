"""The child runs as a script with ``python -I`` and imports nothing of decoderkit: its
modules import only the standard library and each other (relatively), and a learner file run
in a real child sees no decoderkit module in ``sys.modules``."""

import ast
import sys
from pathlib import Path

from decoderkit.grade.judge.items import Inputs
from decoderkit.grade.run import sandbox
from decoderkit.grade.run.sandbox import Call

CHILD = sandbox.CHILD_SCRIPT.parent
ALLOWED = {"__future__", "numpy", "torch"}  # torch: main() imports it, the rest get it passed


def test_child_modules_import_only_the_standard_library_and_each_other():
    for path in sorted(CHILD.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            for name in names:  # numpy: only to copy a learner's numpy value (values.plain)
                top = name.partition(".")[0]
                assert top in ALLOWED or top in sys.stdlib_module_names, (path.name, name)


def test_a_child_sees_no_decoderkit_module(tmp_path):
    learner = tmp_path / "probe.py"
    learner.write_text("import sys\n\ndef probe():\n"
                       "    return sum(m.partition('.')[0] == 'decoderkit' for m in sys.modules)\n"
                       "\ndef script_dir_on_path():\n"
                       f"    return int({str(CHILD)!r} in sys.path)\n")
    calls = [Call(id="p", name="probe", kind="call"),
             Call(id="d", name="script_dir_on_path", kind="call")]
    run = sandbox.run_child(learner, calls, Inputs().tensors, ["probe", "script_dir_on_path"])
    assert run.problem is None, run.problem
    assert run.results["p"]["value"] == 0 and run.results["d"]["value"] == 0
    assert run.decoderkit == []
    assert Path(sandbox.CHILD_SCRIPT).name == "__main__.py"
