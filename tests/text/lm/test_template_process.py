"""A chat template renders in a process of its own: what the sandbox's checks cannot see
(memory kept across many allowed values, library code one line runs) is bounded there, and
the caller's memory and time are never the template's. It renders as the sandbox does in
this process, spans included, and a killed or ended process is replaced."""

from __future__ import annotations

import os
import signal
import tracemalloc

import pytest

from decoderkit.text.lm import sandbox, template_process
from decoderkit.text.lm.chat import ChatTemplate
from decoderkit.text.lm.sandbox import TemplateFailed, compile_template, render
from text.lm.chat_dirs import HUNGRY

MESSAGES = [{"role": "user", "content": "To be?"}, {"role": "assistant", "content": "Yes."}]
MARKED = ("{% for m in messages %}{{ m.role }}: {% if m.role == 'assistant' %}{% generation %}"
          "{{ m.content }}{% endgeneration %}{% else %}{{ m.content }}{% endif %}\n{% endfor %}")
# one line of library code, within every size bound: about a second of jinja2's Python
SLOW = "{{ lipsum(800, html=False, min=99, max=100)|length }}"


def test_it_renders_as_the_sandbox_does_here():
    template = ChatTemplate(MARKED, {"eos_token": "</s>"})
    variables = template._variables(MESSAGES, False)
    spans: list = []
    here = render(compile_template(MARKED), variables, spans)
    assert template.render(MESSAGES, False) == here == "user: To be?assistant: Yes."
    assert template.render_marked(MESSAGES) == (here, spans) and spans == [(23, 27)]
    with pytest.raises(TemplateFailed, match="says: no"):
        ChatTemplate("{{ raise_exception('no') }}").render(MESSAGES)


# a block's output is kept by the template's own code, piece by piece (no piece past a bound)
CAPTURED = ("{% set x %}{% for i in range(1000) %}{{ 'x' * 1000000 }}{% endfor %}{% endset %}"
            "{{ x|length }}")


@pytest.mark.parametrize("source", [HUNGRY, CAPTURED], ids=["namespace", "captured block"])
def test_memory_kept_across_allowed_values_is_bounded_in_the_templates_process(source):
    template = ChatTemplate(source)
    tracemalloc.start()
    try:
        with pytest.raises(TemplateFailed, match="ran out of memory"):
            template.render(MESSAGES)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 << 20, f"{peak >> 20} MB here"  # none of it in this process
    assert ChatTemplate("{{ messages|length }}").render(MESSAGES) == "2"


def test_library_code_past_the_time_bound_is_stopped(monkeypatch):
    """The tracer reads the clock between the template's lines only; one line of library code
    runs on until the process is killed (the bound made 0 s plus 0.1 s of grace here)."""
    template = ChatTemplate(SLOW)
    assert int(template.render(MESSAGES)) > 400000  # within the real bound
    monkeypatch.setattr(sandbox, "MAX_TEMPLATE_SECONDS", 0.0)
    monkeypatch.setattr(template_process, "GRACE_SECONDS", 0.1)
    with pytest.raises(TemplateFailed, match="ran longer than 0.0 s"):
        template.render(MESSAGES)
    assert template.process.child is None  # killed; the next render starts another
    monkeypatch.undo()
    assert int(template.render(MESSAGES)) > 400000


def test_an_ended_process_is_replaced_and_sigint_does_not_reach_it():
    template = ChatTemplate("{{ messages|length }}")
    assert template.render(MESSAGES) == "2"
    os.kill(template.process.child.pid, signal.SIGINT)  # ignored: Ctrl-C is lm chat's
    assert template.render(MESSAGES) == "2"
    template.process.child.kill()
    template.process.child.wait()
    assert template.render(MESSAGES) == "2"
    template.process.close()
    assert template.process.child is None
