"""A chat template rendered in a process of its own, so that its bounds hold whatever the
template calls.

The sandbox (``text.lm.sandbox``) sizes each operation before it runs and its tracer
counts and times the template's own lines, but no check inside a process can stop library
code that one template line runs (jinja2's filters, C code: the clock is read between lines
only), nor bound what many allowed values hold together. So ``TemplateProcess`` renders in a
child Python process: its address space limited to what it had at start plus
``RENDER_MEMORY`` (``RLIMIT_AS``: past it an allocation fails, a ``MemoryError``, refused as
the template's failure), and killed once a render runs ``MAX_TEMPLATE_SECONDS`` +
``GRACE_SECONDS`` (the next render starts a new one). The server's or the chat's own memory and
time are never the template's: the parent holds only the request and the reply, at most
``MAX_RENDERED_CHARS``. A killed or crashed child is a ``TemplateFailed`` naming the bound.

The child imports jinja2 and the sandbox only (not decoderkit's package, which imports
torch): about 0.1 s to start, once per template, then a render's messages and text cross a
pipe as JSON lines (well under a millisecond for a chat). It ignores SIGINT and runs in its own
session: Ctrl-C in ``lm chat`` stops the reply, never the template's process.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
import weakref
from pathlib import Path

from decoderkit.text.lm.bounds import MAX_RENDERED_CHARS, TemplateFailed

RENDER_MEMORY = 512 << 20  # address space a render may add to the child's at start (bytes)
GRACE_SECONDS = 1.0  # past the sandbox's MAX_TEMPLATE_SECONDS, before the child is killed
START_SECONDS = 120.0  # for the child to start (its imports), on a loaded machine
REPLY_BYTES = 8 * MAX_RENDERED_CHARS + (1 << 16)  # a reply's JSON line, at most
PACKAGE = Path(__file__).resolve().parents[2]  # decoderkit's own directory
BOOT = ("import sys, types; p = types.ModuleType('decoderkit'); p.__path__ = [sys.argv[1]]; "
        f"sys.modules['decoderkit'] = p; from {__name__} import serve; serve()")


class TemplateProcess:
    """The child that renders one template (``source``), started at the first render;
    thread-safe (one render at a time)."""

    def __init__(self, source: str):
        self.source, self.child = source, None
        self.lock = threading.Lock()

    def render(self, variables: dict, spans: bool = False) -> tuple[str, list | None]:
        """(the text, the generation blocks' spans if asked) for ``variables`` (JSON
        values); ``TemplateFailed`` for the template's failure or a bound."""
        from decoderkit.text.lm.sandbox import MAX_TEMPLATE_SECONDS

        request = json.dumps({"variables": variables, "spans": spans}).encode() + b"\n"
        with self.lock:
            child = self._started()
            try:
                child.stdin.write(request)
                child.stdin.flush()
            except OSError:  # it died since: out of memory, or killed
                self._stop()
                raise TemplateFailed("the chat template's process ended (out of memory?)"
                                     ) from None
            reply = self._reply(MAX_TEMPLATE_SECONDS + GRACE_SECONDS)
        if reply is None:
            raise TemplateFailed(f"the chat template ran longer than {MAX_TEMPLATE_SECONDS} s")
        if "error" in reply:
            raise TemplateFailed(reply["error"])
        return reply["text"], reply["spans"]

    def close(self) -> None:
        """End the child (a later render starts a new one)."""
        with self.lock:
            self._stop()

    def _started(self) -> subprocess.Popen:
        if self.child is not None and self.child.poll() is not None:
            self._stop()  # it ended between renders (killed from outside): a new one
        if self.child is None:
            self.child = subprocess.Popen(
                [sys.executable, "-I", "-c", BOOT, str(PACKAGE)], stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, start_new_session=True)
            self._finalizer = weakref.finalize(self, _end, self.child)
            self.child.stdin.write(json.dumps({"source": self.source}).encode() + b"\n")
            self.child.stdin.flush()
            ready = self._reply(START_SECONDS)
            if ready is None or "error" in ready:
                self._stop()
                raise TemplateFailed("the chat template's process did not start: "
                                     f"{(ready or {}).get('error', 'no answer')}")
        return self.child

    def _reply(self, seconds: float) -> dict | None:
        """The child's next JSON line within ``seconds`` (None: it ran past them, and is
        killed); a crash or an oversized reply is a ``TemplateFailed``."""
        fd, data = self.child.stdout.fileno(), b""
        deadline = time.monotonic() + seconds
        while not data.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                self._stop()
                return None
            chunk = os.read(fd, 1 << 16)
            if not chunk or len(data) + len(chunk) > REPLY_BYTES:
                self._stop()
                raise TemplateFailed("the chat template's process ended (it needed more than "
                                     f"{RENDER_MEMORY >> 20} MB?)")
            data += chunk
        return json.loads(data)

    def _stop(self) -> None:
        if self.child is not None:
            self._finalizer()
            self.child = None


def _end(child: subprocess.Popen) -> None:
    child.kill()
    child.wait()
    for pipe in (child.stdin, child.stdout):
        pipe.close()


def serve() -> None:
    """The child: compile the template of the first line, answer each render request line
    (``{"text", "spans"}`` or ``{"error"}``) until the input ends."""
    import resource

    from decoderkit.base.errors import UsageError
    from decoderkit.text.lm.sandbox import compile_template, render

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    out, sys.stdout = sys.stdout.buffer, sys.stderr  # nothing else on the replies' pipe
    lines = iter(sys.stdin.buffer.readline, b"")
    try:
        template, reply = compile_template(json.loads(next(lines))["source"]), {}
    except UsageError as err:
        template, reply = None, {"error": str(err)}
    with open("/proc/self/statm") as f:
        size = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    resource.setrlimit(resource.RLIMIT_AS, (size + RENDER_MEMORY, size + RENDER_MEMORY))
    _answer(out, reply)
    for line in lines if template is not None else ():
        try:
            request = json.loads(line)
            spans = [] if request["spans"] else None
            reply = {"text": render(template, request["variables"], spans), "spans": spans}
        except UsageError as err:
            reply = {"error": str(err)}
        except MemoryError:
            reply = {"error": "the chat template ran out of memory (it builds more than a "
                              "render may hold)"}
        _answer(out, reply)


def _answer(out, reply: dict) -> None:
    out.write(json.dumps(reply).encode() + b"\n")
    out.flush()
