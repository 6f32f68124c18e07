"""The chat template sandbox: transformers' names and options, and the bounds that stop a
template that loops, renders megabytes or builds a huge value in one operation, whichever
operator, filter, global or method builds it, before it is built (each a ``TemplateFailed``,
the render's peak allocation a few MB); a template cannot reach Python's internals."""

from __future__ import annotations

import sys
import tracemalloc

import pytest

from decoderkit.base.errors import UsageError
from decoderkit.text.lm import sandbox
from decoderkit.text.lm.sandbox import TemplateFailed, compile_template, render


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
    ("{{ 9 ** 99999999 }}", "a number of about"),
    ("{{ (10 ** 10000) * (10 ** 10000) * (10 ** 10000) * (10 ** 10000) }}", "a number of"),
    ("{{ 'x'.ljust(1000000000) }}", "passes 1000000000"),
    ("{{ 'x'|center(1000000000) }}", "passes 1000000000"),
    ("{{ '%01000000000d' % 1 }}", "a formatted text"),
    ("{{ '{:1000000000}'.format(1) }}", "a formatted text"),
    ("{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}"
     "{% endfor %}", "a concatenation"),  # doubling: 2^64 characters, stopped at 2^20
    ("{{ (['x' * 1000000] * 1000)|join }}", "a joined text"),
    ("{{ ''.join(['x' * 1000000] * 1000) }}", "a joined text"),
    ("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", "RecursionError"),
    ("{{ ''.__class__.__mro__ }}", "says: access to attribute .__class__. of .str. object"),
    ("{{ messages.append(1) }}", "says: .* unsafe"),
    ("{% set ns = namespace() %}{% set ns._x = 1 %}", "underscore"),
])
def test_bounds_and_the_sandbox_stop_a_template(source, why, monkeypatch):
    monkeypatch.setattr(sandbox, "MAX_TEMPLATE_SECONDS", 600.0)  # the bound named, not the clock
    with pytest.raises(TemplateFailed, match=why):
        run(source, messages=[])


# the examples (each rendered on main, building 100-300 MB in the process, the last
# 5 GB until a MemoryError after 50 s; lipsum 16 s), and each class's other members
BUILDERS = {
    "fromkeys|string": "{{ dict.fromkeys(range(300), 'x' * 1000000)|string|length }}x",
    "range(100000)": "{{ dict.fromkeys(range(100000), 'x' * 1000000)|string|length }}x",
    "indent": "{{ ('x\\n' * 500000)|indent(300)|length }}",
    "indent str": "{{ ('x\\n' * 500000)|indent(' ' * 300)|length }}",
    "tojson": "{{ dict.fromkeys(range(100), 'x' * 1000000)|tojson|length }}",
    "tojson indent": "{{ (range(90000)|list)|tojson(indent=20)|length }}",
    "pprint": "{{ dict.fromkeys(range(100), 'x' * 1000000)|pprint|length }}",
    "|replace": "{{ ('x' * 100)|replace('x', 'y' * 1000000)|length }}",
    "str.replace": "{{ ('x' * 100).replace('x', 'y' * 1000000)|length }}",
    "replace ''": "{{ ('x' * 1000)|replace('', 'y' * 10000)|length }}",
    "|format": "{{ ('%*s' * 100)|format(*([1000000, 'x'] * 100))|length }}",
    "% format": "{{ ('%s' * 100) % (('x' * 100000,) * 100) }}",
    "% mapping": "{{ ('%(a)s' * 1000) % {'a': 'x' * 10000} }}",
    "str.format": "{{ '{}'.format(dict.fromkeys(range(100), 'x' * 1000000))|length }}",
    "format fields": "{{ ('{0}' * 1000).format('x' * 10000) }}",
    "format widths": "{{ ('{:999999}' * 100).format(*range(100)) }}",
    "join separator": "{{ ('x' * 1000000).join(['a'] * 100)|length }}",
    "|join separator": "{{ (['a'] * 100)|join('x' * 1000000)|length }}",
    "join of containers": "{{ [dict.fromkeys(range(100), 'x' * 1000000)]|join|length }}",
    "concatenation": "{{ dict.fromkeys(range(100), 'x' * 1000000) ~ '' }}",
    "written": "{{ dict.fromkeys(range(100), 'x' * 1000000) }}",
    "namespace": "{% set ns = namespace(a=dict.fromkeys(range(100), 'x' * 1000000)) %}{{ ns }}",
    "expandtabs": "{{ ('\\t' * 1000000).expandtabs(1000)|length }}",
    "translate": "{{ ('x' * 1000000).translate({120: 'y' * 1000})|length }}",
    "wordwrap": "{{ ('x ' * 500000)|wordwrap(1, wrapstring='y' * 100)|length }}",
    "lipsum": "{{ lipsum(20000, html=False)|length }}",
    "strftime": "{{ strftime_now('%c' * 100000)|length }}",
    "bytes": "{{ ('x'.encode() * 100000000)|length }}",
    "sum of lists": "{{ ([[0] * 1000] * 1000)|sum(start=[])|length }}",
}


@pytest.mark.parametrize("source", BUILDERS.values(), ids=BUILDERS.keys())
def test_what_an_operation_builds_is_bounded_before_it_is_built(source):
    """Each refused at once, the render's peak allocation a few MB (tracemalloc: the
    values built on the way count; the refused one is never built)."""
    tracemalloc.start()
    try:
        with pytest.raises(TemplateFailed, match="builds|computes|sums values"):
            run(source, messages=[])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20, f"{peak >> 20} MB"


def test_what_stays_within_the_bounds_renders_as_jinja2_does():
    assert run("{{ ('a\nb')|indent(2, first=True) }}|{{ 'x'|replace('x', 'yy') }}|"
               "{{ '%s-%d'|format('a', 3) }}|{{ '{}:{}'.format(1, 'b') }}|"
               "{{ ', '.join(['p', 'q']) }}|{{ [1, 2]|sum }}|{{ d|tojson(indent=1) }}",
               d={"k": [1]}) == '  a\n  b|yy|a-3|1:b|p, q|3|{\n "k": [\n  1\n ]\n}'
    assert len(run("{{ lipsum(2, html=False) }}")) > 20


def test_internals_are_out_of_reach():
    assert run("{{ messages.__class__ }}", messages=[]) == ""  # undefined in the sandbox


def test_the_step_bound_counts_template_lines_only(monkeypatch):
    monkeypatch.setattr(sandbox, "MAX_TEMPLATE_STEPS", 50)
    monkeypatch.setattr(sandbox, "MAX_TEMPLATE_SECONDS", 600.0)  # a loaded machine: steps first
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
