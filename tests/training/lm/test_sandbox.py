"""The chat template sandbox: transformers' names and options, and the bounds that stop a
template that loops, renders megabytes or builds a huge value in one operation (each a
``TemplateFailed``); a template cannot reach Python's internals."""

from __future__ import annotations

import sys

import pytest

from decoderkit.base.errors import UsageError
from decoderkit.training.lm import sandbox
from decoderkit.training.lm.sandbox import TemplateFailed, compile_template, render


def run(source: str, **variables) -> str:
    return render(compile_template(source), variables)


def test_transformers_options_and_names():
    assert run("{% for x in xs %}\n  {{ x }}\n{% endfor %}\n", xs=[1, 2]) == "  1\n  2\n"
    assert run("{{ d|tojson }}", d={"a": "<é>"}) == '{"a": "<é>"}'
    assert run("{% for x in xs %}{% if x > 1 %}{% break %}{% endif %}{{ x }}{% endfor %}",
               xs=[1, 2, 3]) == "1"
    assert run("{% set ns = namespace(n=0) %}{% for x in xs %}{% set ns.n = ns.n + x %}"
               "{% endfor %}{{ ns.n }}", xs=[1, 2, 3]) == "6"
    assert run("{{ dict(a=1)['a'] }}{% generation %}ok{% endgeneration %}") == "1ok"
    assert run("{{ a ~ 1 ~ b }}|{{ xs|join(', ') }}|{{ ','.join(xs) }}", a="x", b=None,
               xs=["p", "q"]) == "x1None|p, q|p,q"
    assert len(run("{{ strftime_now('%Y') }}")) == 4
    with pytest.raises(TemplateFailed, match="says: roles must alternate"):
        run("{{ raise_exception('roles must alternate') }}")


@pytest.mark.parametrize("source, why", [
    ("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
     "steps"),
    ("{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}", "characters"),
    ("{{ 'x' * 100000000 }}", "repeated value"),
    ("{{ 9 ** 99999999 }}", "a number past"),
    ("{{ 'x'.ljust(1000000000) }}", "passes 1000000000"),
    ("{{ 'x'|center(1000000000) }}", "passes 1000000000"),
    ("{{ '%01000000000d' % 1 }}", "width"),
    ("{{ '{:1000000000}'.format(1) }}", "width"),
    ("{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}"
     "{% endfor %}", "a concatenation"),  # doubling: 2^64 characters, stopped at 2^20
    ("{{ (['x' * 1000000] * 1000)|join }}", "a joined text"),
    ("{{ ''.join(['x' * 1000000] * 1000) }}", "a joined text"),
    ("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", "RecursionError"),
    ("{{ ''.__class__.__mro__ }}", "says: access to attribute .__class__. of .str. object"),
    ("{{ messages.append(1) }}", "says: .* unsafe"),
    ("{% set ns = namespace() %}{% set ns._x = 1 %}", "underscore"),
])
def test_bounds_and_the_sandbox_stop_a_template(source, why):
    with pytest.raises(TemplateFailed, match=why):
        run(source, messages=[])


def test_internals_are_out_of_reach():
    assert run("{{ messages.__class__ }}", messages=[]) == ""  # undefined in the sandbox


def test_the_step_bound_counts_template_lines_only(monkeypatch):
    monkeypatch.setattr(sandbox, "MAX_TEMPLATE_STEPS", 50)
    assert run("{{ xs|sort|join(',') }}", xs=list(range(1000, 0, -1))).startswith("1,2")
    with pytest.raises(TemplateFailed, match="more than 50 steps"):
        run("{% for x in xs %}{% endfor %}", xs=range(100))


def test_the_time_bound(monkeypatch):
    monkeypatch.setattr(sandbox, "MAX_TEMPLATE_SECONDS", 0.0)
    with pytest.raises(TemplateFailed, match="longer than 0.0 s"):
        run("{% for x in xs %}{% endfor %}", xs=range(5000))


def test_a_tracer_already_set_is_restored():
    def tracer(frame, event, arg):
        return None
    old = sys.gettrace()
    sys.settrace(tracer)
    try:
        with pytest.raises(TemplateFailed):
            run("{{ raise_exception('no') }}")
        assert sys.gettrace() is tracer
    finally:
        sys.settrace(old)


def test_a_syntax_error_is_one_line():
    with pytest.raises(UsageError, match="T: line 1: "):
        compile_template("{% if %}", "T")
