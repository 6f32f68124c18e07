"""Jinja chat templates run as transformers runs them, in a sandbox, within bounds.

``compile_template(source)`` builds the template in jinja2's ``ImmutableSandboxedEnvironment``
with transformers' options and names (``utils.chat_template_utils._compile_jinja_template``):
``trim_blocks``, ``lstrip_blocks``, the loop controls (``break``, ``continue``), the
``{% generation %}`` block (its body rendered as is), a ``tojson`` filter that does not escape
HTML, the globals ``raise_exception``, ``strftime_now``, ``dict`` and ``namespace`` (refusing
underscore names). A template never runs outside this environment: the sandbox refuses any
attribute that reaches Python's internals and any call that changes a value the template is
given.

``render(template, variables)`` runs it within bounds, so a template from a model directory
cannot hold a server: its output is cut at ``MAX_RENDERED_CHARS``, its own lines are counted
(``MAX_TEMPLATE_STEPS``, a loop that renders nothing included) and timed
(``MAX_TEMPLATE_SECONDS``), and what any operator, filter, global or string method builds may
not pass ``MAX_RENDERED_CHARS`` either, sized before it is built (``text.lm.bounds``; a
string doubled in a loop stops). Passing any bound, running out of memory (``MemoryError``),
or an error of the template (``raise_exception``, a missing key, a type error), is a
``TemplateFailed`` naming it. What no check in this process can stop (library code run from
one line, memory kept across many) is bounded by running it in a process of its own
(``text.lm.template_process``). Python's ``sys.settrace`` counts the steps, in the
rendering thread only, for the render alone (a debugger's tracer is restored after it).
"""

from __future__ import annotations

import json
import sys
import time
from contextvars import ContextVar
from datetime import datetime

import jinja2
import jinja2.ext
import jinja2.filters
import jinja2.nodes
from jinja2.compiler import CodeGenerator, optimizeconst
from jinja2.sandbox import ImmutableSandboxedEnvironment

from decoderkit.base.errors import UsageError
from decoderkit.text.lm import bounds
from decoderkit.text.lm.bounds import (  # noqa: F401 (TemplateFailed: public here)
    MAX_RENDERED_CHARS,
    TemplateFailed,
    check_size,
)

MAX_TEMPLATE_STEPS = 1_000_000  # lines of template code run per render
MAX_TEMPLATE_SECONDS = 2.0  # wall-clock time per render
TEMPLATE_FILE = "<template>"  # the name jinja2 gives a template's code (what the tracer counts)
SHOWN_CHARS = 1000  # of a template's own error message, at most


def compile_template(source: str, where: str = "the chat template") -> jinja2.Template:
    """``source`` compiled in the bounded sandbox; a syntax error is a ``UsageError`` naming
    ``where`` and the line."""
    env = _Sandbox(trim_blocks=True, lstrip_blocks=True, finalize=_shown,
                   extensions=[_Generation, jinja2.ext.loopcontrols])
    env.filters["tojson"] = _tojson
    env.filters = {name: bounds.bounded_filter(name, f) for name, f in env.filters.items()}
    env.globals.update(raise_exception=_raise_exception, strftime_now=_strftime_now,
                       dict=_TemplateDict(), namespace=_Namespace, lipsum=bounds.lipsum)
    try:
        return env.from_string(source)
    except jinja2.TemplateSyntaxError as err:
        raise UsageError(f"{where}: line {err.lineno}: {err.message}") from None


def render(template: jinja2.Template, variables: dict,
           spans: list[tuple[int, int]] | None = None) -> str:
    """The template's text for ``variables``, within the bounds (``TemplateFailed`` past one,
    or for the template's own error). ``spans``, when given, gets the (start, end) characters
    of each ``{% generation %}`` block's output, as transformers' ``AssistantTracker`` finds
    them (the text rendered before the block, then the block's own)."""
    pieces, size = [], 0
    counter = _Steps()
    tracker = _Tracker(spans)
    old, mark = sys.gettrace(), _TRACKER.set(tracker)
    sys.settrace(counter.trace)
    try:
        for piece in template.generate(**variables):
            size += len(piece)
            if size > MAX_RENDERED_CHARS:
                raise TemplateFailed(f"the chat template rendered more than "
                                     f"{MAX_RENDERED_CHARS} characters")
            pieces.append(piece)
            tracker.size = size
    except TemplateFailed:
        raise
    except jinja2.TemplateError as err:  # raise_exception, a security refusal, an undefined
        said = (err.message or type(err).__name__)[:SHOWN_CHARS]
        raise TemplateFailed(f"the chat template says: {said}") from None
    except MemoryError:  # what no size check foresaw: the template's own failure
        raise TemplateFailed("the chat template ran out of memory (it builds more than a "
                             "render may hold)") from None
    except (TypeError, ValueError, LookupError, ArithmeticError, AttributeError,
            RecursionError) as err:
        raise TemplateFailed(f"the chat template failed on these messages: "
                             f"{type(err).__name__}: {err}") from None
    finally:
        sys.settrace(old)
        _TRACKER.reset(mark)
    return "".join(pieces)


class _Tracker:
    """A render's characters so far and the generation blocks' spans (None: not wanted)."""

    def __init__(self, spans: list[tuple[int, int]] | None):
        self.size, self.spans = 0, spans


_TRACKER: ContextVar[_Tracker | None] = ContextVar("generation_spans", default=None)


class _Steps:
    """The tracer: counts the template's lines and checks the clock (``TemplateFailed``)."""

    def __init__(self):
        self.steps, self.deadline = 0, time.monotonic() + MAX_TEMPLATE_SECONDS

    def trace(self, frame, event, arg):
        return self.line if frame.f_code.co_filename == TEMPLATE_FILE else None

    def line(self, frame, event, arg):
        self.steps += 1
        if self.steps > MAX_TEMPLATE_STEPS:
            raise TemplateFailed(f"the chat template ran more than {MAX_TEMPLATE_STEPS} steps")
        if self.steps % 1024 == 0 and time.monotonic() > self.deadline:
            raise TemplateFailed(f"the chat template ran longer than {MAX_TEMPLATE_SECONDS} s")
        return self.line


class _Generator(CodeGenerator):
    """jinja2's code generator with ``a ~ b`` joined by the sandbox's ``bounded_join``
    (jinja2's ``str_join``, its size checked first), so doubling a string in a loop stops."""

    @optimizeconst
    def visit_Concat(self, node, frame) -> None:
        if frame.eval_ctx.volatile or frame.eval_ctx.autoescape:  # never here: no autoescape
            return super().visit_Concat(node, frame)
        self.write("environment.bounded_join((")
        for arg in node.nodes:
            self.visit(arg, frame)
            self.write(", ")
        self.write("))")


class _Sandbox(ImmutableSandboxedEnvironment):
    """The immutable sandbox with the size of each operation's result bounded."""

    intercepted_binops = frozenset({"*", "**", "+", "%"})
    code_generator_class = _Generator

    def bounded_join(self, values) -> str:
        """``~``: the values' texts joined, sized first (``bounds.text_size``)."""
        check_size(sum(len(v) if isinstance(v, str) else bounds.text_size(v) for v in values),
                   "a concatenation")
        return "".join(map(str, values))

    def call_binop(self, context, operator, left, right):
        bounds.check_binop(operator, left, right)
        return super().call_binop(context, operator, left, right)

    def call(__self, __context, __obj, *args, **kwargs):  # noqa: N805 - jinja2's signature
        bounds.check_arguments(args, kwargs)
        args = bounds.check_method(getattr(__obj, "__wrapped__", __obj), args, kwargs)
        return super().call(__context, __obj, *args, **kwargs)


class _Generation(jinja2.ext.Extension):
    """transformers' ``{% generation %}...{% endgeneration %}`` (it marks the assistant's
    tokens for training masks): the body, as transformers renders it, its span recorded where
    ``render`` was given a list for them."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

    def _body(self, caller):
        text = caller()
        tracker = _TRACKER.get()
        if tracker is not None and tracker.spans is not None:
            tracker.spans.append((tracker.size, tracker.size + len(text)))
        return text


def _raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def _tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    """transformers' ``tojson``: json.dumps, HTML characters not escaped."""
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def _strftime_now(format):
    bounds.check_strftime(format)
    return datetime.now().strftime(format)


def _shown(value):
    """jinja2's ``finalize``: a value written by ``{{ ... }}``, its text sized first."""
    bounds.check_text(value, "a written value")
    return value


class _TemplateDict:
    """``dict(...)`` and ``dict.fromkeys`` without the type itself (no attribute escapes)."""

    def __call__(self, *args, **kwargs):
        return dict(*args, **kwargs)

    def fromkeys(self, *args, **kwargs):
        return dict.fromkeys(*args, **kwargs)


class _Namespace(jinja2.utils.Namespace):
    """jinja2's ``namespace`` refusing underscore names (CPython's internals), as
    transformers' does."""

    def __init__(*args, **kwargs):  # noqa: N805 - jinja2's Namespace signature
        self, args = args[0], args[1:]
        attrs = dict(*args, **kwargs)
        for name in attrs:
            _Namespace._check_name(name)
        jinja2.utils.Namespace.__init__(self, attrs)

    def __setitem__(self, name, value):
        _Namespace._check_name(name)
        jinja2.utils.Namespace.__setitem__(self, name, value)

    @staticmethod
    def _check_name(name):
        if isinstance(name, str) and name.startswith("_"):
            raise jinja2.exceptions.SecurityError(
                f"chat templates cannot store underscore-prefixed attributes on a namespace, "
                f"got {name!r}")
