"""One spelling per family: every layer's per-family table is keyed by ``base.families``' names,
and a name spelled as before 0.3 still reads, with a warning naming the new."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

from conftest import tiny_checkpoint
from decoderkit.base.errors import UsageError
from decoderkit.base.families import CLASSIFIER, FAMILIES, LM, OLD, SAID, SEQ2SEQ, family
from decoderkit.interop.checkpoints import FAMILIES as OPENED
from decoderkit.interop.checkpoints import FORMATS, find_format, load_checkpoint

SRC = Path(__file__).resolve().parents[2] / "src" / "decoderkit"


def test_every_per_family_table_is_keyed_by_the_one_spelling():
    from decoderkit.cli.serve import LIMITS
    from decoderkit.generation.engines import UNAVAILABLE

    assert set(OPENED) == set(FAMILIES) == set(SAID) == {SEQ2SEQ, LM, CLASSIFIER}
    assert set(UNAVAILABLE) == set(LIMITS) == {SEQ2SEQ, LM}
    assert {f.family for f in FORMATS} == set(FAMILIES)


def test_no_other_module_names_a_family_itself():
    """No module but base/families.py assigns a family's constant (``SEQ2SEQ, LM = "seq2seq",
    "lm"`` was generation/engines.py's, ``TRANSLATION, ...`` interop/checkpoints.py's): they
    import it."""
    names, spellings = {"SEQ2SEQ", "LM", "CLASSIFIER", "TRANSLATION"}, {*FAMILIES, *OLD}
    found = [f"{p.relative_to(SRC)}:{node.lineno}"
             for p in sorted(SRC.rglob("*.py")) if p != SRC / "base" / "families.py"
             for node in ast.parse(p.read_text(encoding="utf-8")).body
             if isinstance(node, ast.Assign) and names & {
                 n.id for t in node.targets for n in ast.walk(t) if isinstance(n, ast.Name)}
             and spellings & {n.value for n in ast.walk(node.value)
                              if isinstance(n, ast.Constant)}]
    assert not found, f"a family named outside base/families.py: {found}"


def test_the_old_spelling_reads_with_a_warning_naming_the_new(tmp_path):
    with pytest.warns(DeprecationWarning, match="'seq2seq'"):
        assert family("translation") == SEQ2SEQ
    ckpt = tiny_checkpoint(tmp_path / "run")
    with pytest.warns(DeprecationWarning, match="'seq2seq'"):
        assert find_format(ckpt, families=("translation",)).family == SEQ2SEQ
    with pytest.warns(DeprecationWarning, match=re.escape("decoderkit.base.families.SEQ2SEQ")):
        old = importlib.import_module("decoderkit.interop.checkpoints").TRANSLATION
    with pytest.warns(DeprecationWarning):
        assert load_checkpoint(ckpt, families=(old, "translation")).config is not None


def test_an_unknown_family_is_refused_naming_the_families():
    with pytest.raises(UsageError, match="no model family 'gpt': the families are seq2seq, lm, "
                                         "classifier"):
        family("gpt")
    assert [family(name) for name in FAMILIES] == list(FAMILIES)  # no warning, as given
