"""``decoderkit lm chat`` driven through stdin: each reply is the greedy continuation of
transformers' apply_chat_template ids for the history so far (the replies kept in it), Ctrl-C
(a SIGINT raised at each point where it can come: a step, the prefill, the template's render,
a finalizer run meanwhile, the reading of a line; and a real one in a terminal, whatever the
SIGINT disposition the command inherits) stops one reply and not the program, a directory
without a template is one line."""

from __future__ import annotations

import contextlib
import io
import os
import select
import signal
import sys
import time

import pytest

from cli.lm.helpers import one_line
from decoderkit.cli import main
from decoderkit.generation.lm.complete import generate
from decoderkit.interop.checkpoints import load_checkpoint
from decoderkit.generation.lm.rows import Rows
from decoderkit.text.lm.chat import ChatTemplate
from text.lm.chat_dirs import HUNGRY, chat_directory, interrupt_at, interrupt_step

transformers = pytest.importorskip("transformers")
SYSTEM = "You are terse."
TURNS = ["To be, or not to be?", "All that glitters?"]


@pytest.fixture(scope="module")
def directory(tmp_path_factory):
    return chat_directory(tmp_path_factory.mktemp("chat") / "llama3", "llama3")


def chat(monkeypatch, capsys, directory, lines, *flags) -> str:
    monkeypatch.setattr(sys, "stdin", io.StringIO("".join(f"{x}\n" for x in lines)))
    assert main(["lm", "chat", "--checkpoint", str(directory), "--system", SYSTEM, "--greedy",
                 "--max-new-tokens", "6", *flags]) == 0
    return capsys.readouterr().out


def reference_replies(directory, first: str | None = None, n_tokens: int = 6) -> list[str]:
    """Each turn's reply from transformers' ids for the history, greedy, to an end id (the
    first reply ``first`` where given)."""
    hf = transformers.AutoTokenizer.from_pretrained(directory)
    ckpt = load_checkpoint(directory)
    end = {hf.convert_tokens_to_ids(t) for t in ("<|eot_id|>", "<|endoftext|>")}
    messages, replies = [{"role": "system", "content": SYSTEM}], []
    for turn in TURNS:
        messages.append({"role": "user", "content": turn})
        ids = hf.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                     return_dict=False)
        out = generate(ckpt.model, [ids], max_new_tokens=n_tokens, greedy=True)[0]
        out = out[:next((k for k, t in enumerate(out) if t in end), len(out))]
        replies.append(hf.decode(out, skip_special_tokens=True) if first is None or replies
                       else first)
        messages.append({"role": "assistant", "content": replies[-1]})
    return replies


def test_each_reply_continues_the_history_as_transformers_renders_it(monkeypatch, capsys,
                                                                      directory):
    out = chat(monkeypatch, capsys, directory, TURNS)
    assert out == "".join(f"{reply}\n" for reply in reference_replies(directory))


def test_without_prefix_reuse_the_replies_are_the_same(monkeypatch, capsys, directory):
    """(The test above runs with reuse, the default: each turn from the kept prefix.)"""
    out = chat(monkeypatch, capsys, directory, TURNS, "--no-prefix-reuse")
    assert out == "".join(f"{reply}\n" for reply in reference_replies(directory))


@pytest.mark.parametrize("flags, said", [
    (["--prefix-cache-mb", "8", "--no-prefix-reuse"], "--prefix-cache-mb 8 with "
     "--no-prefix-reuse"),
    (["--prefix-cache-mb", "0"], "expected an integer in [1, 1048576], got '0'")])
def test_the_prefix_flags_are_refused_in_one_line(capsys, directory, flags, said):
    assert said in one_line(capsys, ["lm", "chat", "--checkpoint", str(directory), *flags])


def test_ctrl_c_stops_the_reply_not_the_program(monkeypatch, capsys, directory):
    calls = interrupt_step(monkeypatch, at=3)
    out = chat(monkeypatch, capsys, directory, TURNS)
    said, rest = out.split(" [stopped]\n")  # the first reply, cut after 2 tokens
    assert len(calls) > 3 and rest  # the next message is answered, the cut reply in its history
    assert rest == f"{reference_replies(directory, first=said)[1]}\n"


@pytest.mark.parametrize("owner, name, at, in_finalizer", [
    (ChatTemplate, "render", 1, False), (Rows, "join", 1, False), (Rows, "step", 1, False),
    (Rows, "step", 3, True)], ids=["render", "prefill", "first-step", "finalizer"])
def test_ctrl_c_at_each_point_of_a_reply_stops_it(monkeypatch, capsys, directory, owner, name,
                                                  at, in_finalizer):
    """Python's own handler would raise outside the reply's try (render, prefill: the chat
    ends, status 130) or inside a finalizer, where the interpreter drops the exception (the
    reply runs to its end): the chat's flag stops the reply there and then."""
    interrupt_at(monkeypatch, owner, name, at, in_finalizer)
    said, rest = chat(monkeypatch, capsys, directory, TURNS).split(" [stopped]\n")
    assert rest == f"{reference_replies(directory, first=said)[1]}\n"
    assert said == "" or at > 1  # stopped before its first token


def test_ctrl_c_while_a_line_is_read_asks_again(monkeypatch, capsys, directory):
    """A KeyboardInterrupt there (it must leave input()), and the chat reads on."""
    import builtins

    interrupt_at(monkeypatch, builtins, "input", 1)
    out = chat(monkeypatch, capsys, directory, TURNS)
    assert out == "\n" + "".join(f"{reply}\n" for reply in reference_replies(directory))


def test_a_directory_without_a_template_is_one_line(monkeypatch, capsys, tmp_path):
    path = chat_directory(tmp_path / "d", "chatml")
    (path / "chat_template.jinja").unlink()
    monkeypatch.setattr(sys, "stdin", io.StringIO("hi\n"))
    capsys.readouterr()
    line = one_line(capsys, ["lm", "chat", "--checkpoint", str(path)])
    assert "no chat_template.jinja" in line


def test_a_template_linked_out_of_the_directory_or_broken_is_one_line(monkeypatch, capsys,
                                                                     tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("SECRET-API-KEY=abc")
    path = chat_directory(tmp_path / "d", "chatml")
    template = path / "chat_template.jinja"
    template.unlink()
    monkeypatch.setattr(sys, "stdin", io.StringIO("hi\n"))
    for target, said in ((secret, "is a link to"), (tmp_path / "gone", "is a dangling symlink")):
        template.unlink(missing_ok=True)
        template.symlink_to(target)
        capsys.readouterr()
        line = one_line(capsys, ["lm", "chat", "--checkpoint", str(path)])
        assert f"chat_template.jinja {said}" in line and "SECRET" not in line


def test_the_templates_refusal_is_said_and_the_chat_goes_on(monkeypatch, capsys, tmp_path):
    path = chat_directory(tmp_path / "m", "mistral")  # roles must alternate; no system role
    monkeypatch.setattr(sys, "stdin", io.StringIO("hi\n"))
    capsys.readouterr()
    assert main(["lm", "chat", "--checkpoint", str(path), "--system", "x",
                 "--max-new-tokens", "2"]) == 0
    assert "template says: Conversation roles must alternate" in capsys.readouterr().err


def test_a_template_out_of_memory_is_one_line_and_the_chat_goes_on(monkeypatch, capsys,
                                                                   tmp_path):
    path = chat_directory(tmp_path / "m", "chatml", template="{% if messages|length > 1 %}"
                          + HUNGRY + "{% endif %}{{ messages[-1].content }}")
    monkeypatch.setattr(sys, "stdin", io.StringIO("hi\nagain\n"))
    capsys.readouterr()
    assert main(["lm", "chat", "--checkpoint", str(path), "--max-new-tokens", "2"]) == 0
    err = capsys.readouterr().err
    assert err == "decoderkit lm chat: the chat template ran out of memory (it builds more " \
        "than a render may hold)\n"


@pytest.mark.parametrize("inherited", ["default", "ignored and blocked"])
def test_ctrl_c_in_a_terminal(tmp_path, inherited):
    """A real terminal (a pty) and a real Ctrl-C: the endless reply of a model whose logits
    are all equal (greedy: token 0 forever) stops, the prompt comes back, the next message is
    answered, Ctrl-D ends the chat with status 0. The command starts with SIGINT as its
    parent leaves it: the default, or ignored and blocked (both survive exec: an ignored
    SIGINT made Python install no handler, and the reply ran on, as in a test worker that
    some library had left ignoring it)."""
    pty = pytest.importorskip("pty")
    path = chat_directory(tmp_path / "zero", "chatml", zero=True)
    pid, fd = pty.fork()
    if pid == 0:  # the child: the command, its stdin a terminal
        try:
            ignored = inherited != "default"
            signal.signal(signal.SIGINT, signal.SIG_IGN if ignored else signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_BLOCK if ignored else signal.SIG_UNBLOCK,
                                   {signal.SIGINT})
            os.execv(sys.executable, [sys.executable, "-m", "decoderkit", "lm", "chat",
                                      "--checkpoint", str(path), "--greedy",
                                      "--max-new-tokens", "1000000"])
        finally:
            os._exit(127)  # never back into pytest
    try:
        until(fd, b"> ")
        for message in (b"To be?\r", b"Again?\r"):
            os.write(fd, message)
            until(fd, b"!!!!")  # the reply is under way
            os.write(fd, b"\x03")
            assert until(fd, b"> ").endswith(b" [stopped]\r\n> ")
        os.write(fd, b"\x04")
        assert os.waitpid(pid, 0)[1] == 0
    finally:
        with contextlib.suppress(ProcessLookupError, ChildProcessError):
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        os.close(fd)


def until(fd: int, wanted: bytes, seconds: float = 120.0) -> bytes:
    """What the terminal shows until ``wanted`` appears (a test failure after ``seconds``)."""
    seen, deadline = b"", time.monotonic() + seconds
    while time.monotonic() < deadline:
        if select.select([fd], [], [], 0.5)[0]:
            seen += os.read(fd, 4096)
            if wanted in seen:
                return seen[:seen.index(wanted) + len(wanted)]
    raise AssertionError(f"{wanted!r} never came; the terminal showed {seen[-300:]!r}")
