"""``decoderkit lm chat``: a terminal chat with a model that has a chat template."""

from __future__ import annotations

import argparse
import signal
import sys
from contextlib import contextmanager

from decoderkit.base.errors import UsageError
from decoderkit.cli.args import pathname, text
from decoderkit.cli.engines import add_prefix_flags, dtype_of, prefix_cache_mb, use_compile_flags
from decoderkit.cli.lm.common import (
    add_adapter,
    add_generation_flags,
    check_generation_flags,
    settle_flags,
    open_lm,
)
from decoderkit.cli.shape import set_threads

PROMPT = "> "  # shown before each message when stdin is a terminal


def add(lm) -> None:
    """The ``lm chat`` parser: checkpoint, system prompt and the generation flags."""
    p = lm.add_parser("chat", help="chat with a model that has a chat template",
                      description="Talk with a model in the terminal: each line you type is a "
                      "user message, the reply streams as it is generated, and the history is "
                      "kept (the whole conversation rendered by the model's chat template, as "
                      "transformers renders it). Ctrl-C stops the current reply (what was "
                      "said is kept); Ctrl-D (end of input) ends the chat. Lines read from a "
                      "pipe work alike, one message each.")
    p.add_argument("--checkpoint", required=True, metavar="DIR", type=pathname,
                   help="a Hugging Face model directory with a chat template "
                   "(chat_template.jinja, or chat_template in tokenizer_config.json)")
    add_adapter(p)
    p.add_argument("--system", type=text, metavar="TEXT",
                   help="a system message that opens the conversation")
    add_generation_flags(p, "reply", max_new_tokens=512)
    add_prefix_flags(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Read a message, stream the reply, until the input ends."""
    from decoderkit.generation.lm.row import Settings
    from decoderkit.generation.lm.rowwise import for_inference
    from decoderkit.generation.lm.conversation import INTERRUPTED, Conversation

    set_threads(args)
    check_generation_flags(args)
    use_compile_flags(args)
    dtype = dtype_of(args)
    reuse = prefix_cache_mb(args)
    ckpt = open_lm(args.checkpoint, adapter=args.adapter)
    template = ckpt.chat
    if template is None:
        raise UsageError(f"--checkpoint: {ckpt.no_chat}")
    s = settle_flags(args, ckpt.generation, "lm chat")
    settings = Settings(s.max_new_tokens, greedy=s.greedy, temperature=s.temperature,
                        top_k=s.top_k, top_p=s.top_p, seed=args.seed, eos_ids=ckpt.end_ids,
                        stop=tuple(args.stop))
    model = for_inference(ckpt.model, args.int8, args.compile, args.autotune, dtype)
    chat = Conversation(model, ckpt.tokenizer, template, settings, args.system, reuse)
    ask = ""
    if sys.stdin.isatty():
        import readline  # noqa: F401 - line editing and history for input()

        ask = PROMPT
    with CtrlC().installed() as ctrl_c:
        while (line := ctrl_c.read(ask)) is not None:
            if not line.strip():
                continue
            try:
                reply = chat.say(line, lambda piece: print(piece, end="", flush=True),
                                 ctrl_c.stopped)
            except UsageError as err:  # the template refused this conversation
                print(f"decoderkit lm chat: {err}", file=sys.stderr, flush=True)
                continue
            print(" [stopped]" if reply.finish_reason == INTERRUPTED else "", flush=True)
    return 0


class CtrlC:
    """Ctrl-C (SIGINT) as ``lm chat`` takes it, by its own handler: while a line is read, a
    ``KeyboardInterrupt`` that leaves ``input()`` (the line dropped); at any other time only a
    flag (``stopped``) the reply checks between steps. Python's default handler raises
    wherever the interpreter happens to be, where the exception can be swallowed (a
    finalizer, a weakref callback: "Exception ignored in") or raised outside the reply's
    ``try`` (the prefill, the template's render); a flag cannot be lost. ``installed`` also
    takes SIGINT back from a parent that ignored or blocked it (ignored at exec: Python then
    never installs its handler, and the reply would run on)."""

    def __init__(self):
        self.reading, self.pressed = False, False

    def handle(self, signum, frame) -> None:
        if self.reading:
            raise KeyboardInterrupt
        self.pressed = True

    def stopped(self) -> bool:
        """Whether Ctrl-C came since the line was read."""
        return self.pressed

    @contextmanager
    def installed(self):
        """This handler for SIGINT (unblocked) while the chat runs; the previous after."""
        previous = signal.signal(signal.SIGINT, self.handle)
        blocked = signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
        try:
            yield self
        finally:
            if signal.SIGINT in blocked:
                signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
            signal.signal(signal.SIGINT, previous)

    def read(self, ask: str) -> str | None:
        """The next message; None at the end of the input. Ctrl-C while typing drops the
        line; one after it is read counts for the reply (``pressed`` is cleared while
        ``reading`` still holds, so none falls between)."""
        while True:
            try:
                try:
                    self.reading = True
                    return input(ask)
                finally:
                    self.pressed = False
                    self.reading = False
            except EOFError:
                return None
            except KeyboardInterrupt:
                print(flush=True)
