"""The request walk (issue 41's 'done when'): an OpenAI chat request, from the route to the
tokens, passes no module below ``generation`` but ``nn``, and climbs back no more than once.

The LM app is served in-process (FastAPI's TestClient) on a tiny random GPT-2-shaped LM with
a chat template, and one POST /v1/chat/completions is recorded by a profile hook in every
thread the request runs in (the event loop's, the template's, the worker's): each call of a
``decoderkit`` function from the route handler's first line until the first token is sampled
(``generation.lm.choose.choose`` returns), as its *path*: the layers of the ``decoderkit``
frames on its thread's stack, outermost first, compressed to runs
(``serve > generation > nn``). The text made of the token afterwards (stop sequences,
streaming) is its way back up, not its way down, and is not in the walk.

(a) Below ``generation`` only ``nn`` is entered: a frame beneath a ``generation`` frame is
``generation``, ``nn`` or ``base``; nothing of ``text``, nor of a layer above (a callback into
``serve``, a call up into ``training`` or ``interop``). ``base`` is allowed because it is no
detour: it holds no model or text code, only the leaf helpers every layer calls
(``base.checks``' ranges checking a row's settings, ``base.memory`` returning a prefill's
freed pages); a walk that went through ``text``, ``training`` or ``interop`` on its way down
would be one. ``text`` is entered by the route itself, before the rows go to the worker (the
chat template rendered, the prompt and the stops encoded), never beneath ``generation``.

(b) Every path descends from the route and climbs back up at most once, never going down
again after climbing: a model piece that lives in a higher layer (``nn`` calling a
``generation`` module inside the forward, which calls ``nn`` again) makes a path
``generation > nn > generation > nn`` and is refused. The failure message lists each
offending path with the function where each of its runs began.
"""

from __future__ import annotations

import sys
import threading
from dataclasses import replace

import pytest
from fastapi.testclient import TestClient

from decoderkit.serve.lm.app import create_lm_app
from decoderkit.serve.lm.engines import from_lm
from decoderkit.text.lm.chat import ChatTemplate
from serve.lm.lm_serving import tiny_lm

# the layers lowest first (pyproject.toml's layers contract; grade and serve side by side)
HEIGHT = {"base": 0, "nn": 1, "text": 2, "generation": 3, "training": 4, "interop": 5,
          "report": 6, "grade": 7, "serve": 7, "cli": 8}
BENEATH_GENERATION = {"generation", "nn", "base"}  # what a path may enter below generation
ROUTE = ("decoderkit.serve.lm.chat", "chat_completions")  # where the walk starts
SAMPLED = ("decoderkit.generation.lm.choose", "choose")  # its return ends the walk
TEMPLATE = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
            "assistant:")

Path = tuple[tuple[str, str], ...]  # (layer, "module.function" where the run began) per run


def path_of(frame) -> Path:
    """The ``decoderkit`` frames on ``frame``'s stack, outermost first, as layer runs."""
    names = []
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        if module.startswith("decoderkit.") and module.split(".")[1] in HEIGHT:
            names.append((module.split(".")[1], f"{module[11:]}.{frame.f_code.co_name}"))
        frame = frame.f_back
    runs: list[tuple[str, str]] = []
    for layer, where in reversed(names):
        if not runs or runs[-1][0] != layer:
            runs.append((layer, where))
    return tuple(runs)


class Walk:
    """The distinct paths of the calls from the route's start to the first sampled token,
    recorded by ``hook`` (a ``sys.setprofile`` function, in every thread)."""

    def __init__(self):
        self.paths: dict[Path, None] = {}  # in the order first seen
        self.started = self.sampled = False

    def hook(self, frame, event, arg):
        if self.sampled or event not in ("call", "return"):
            return
        key = (frame.f_globals.get("__name__", ""), frame.f_code.co_name)
        if not key[0].startswith("decoderkit."):
            return
        if event == "return":
            self.sampled = self.started and key == SAMPLED
            return
        self.started = self.started or key == ROUTE
        if self.started:
            self.paths.setdefault(path_of(frame))


def faults(paths) -> list[str]:
    """Each path breaking (a) or (b), said with the functions where its runs began. A climb
    back is one ascent (``nn > generation > serve`` is one); a second needs a descent between."""
    said = []
    for path in paths:
        layers = [layer for layer, _ in path]
        heights = [HEIGHT[layer] for layer in layers]
        below = layers[layers.index("generation") + 1:] if "generation" in layers else []
        entered = sorted(set(below) - BENEATH_GENERATION)
        up = next((k for k in range(1, len(heights)) if heights[k] > heights[k - 1]), None)
        again = up is not None and any(heights[k] < heights[k - 1]
                                       for k in range(up + 1, len(heights)))
        why = ([f"enters {', '.join(entered)} beneath generation"] if entered else []) + \
            (["goes down again after climbing back"] if again else [])
        if why:
            said.append(f"{'; '.join(why)}: {' > '.join(w for _, w in path)}")
    return said


def walk_of_one_chat_request() -> Walk:
    model, tokenizer = tiny_lm()
    served = replace(from_lm(model, tokenizer, "tiny"), chat=ChatTemplate(TEMPLATE))
    walk = Walk()
    threading.setprofile(walk.hook)  # the threads the app starts: event loop, worker, pool
    try:
        with TestClient(create_lm_app(served)) as http:
            r = http.post("/v1/chat/completions", json={
                "messages": [{"role": "user", "content": "To be, or not to be?"}],
                "max_tokens": 2, "temperature": 0})
    finally:
        threading.setprofile(None)
        sys.setprofile(None)
    assert r.status_code == 200, r.text
    assert walk.started and walk.sampled, "the walk never reached the first sampled token"
    return walk


@pytest.fixture(scope="module")
def walk() -> Walk:
    return walk_of_one_chat_request()


def test_a_chat_request_enters_only_nn_below_generation_and_climbs_back_once(walk):
    layers = {layer for path in walk.paths for layer, _ in path}
    assert {"serve", "text", "generation", "nn"} <= layers  # the walk went all the way down
    assert any([layer for layer, _ in path][-2:] == ["generation", "nn"] for path in walk.paths)
    said = faults(walk.paths)
    assert not said, "the request's walk:\n" + "\n".join(said)


def test_text_is_entered_by_the_route_before_generation_never_beneath_it(walk):
    texts = [path for path in walk.paths if "text" in [layer for layer, _ in path]]
    assert any("text.lm.chat.encode" in where for path in texts for _, where in path)
    beneath = [" > ".join(w for _, w in path) for path in texts
               if "generation" in [layer for layer, _ in path]]
    assert not beneath, "text entered beneath generation:\n" + "\n".join(beneath)


def test_the_rule_names_the_walks_it_refuses():
    """Synthetic paths: generation calling training, or a callback of serve's; a model piece
    living in generation (the forward's linears and activations were generation's
    ``RowwiseLinear`` and ``RowInvariant`` until nn.rowwise); the one climb a path may make."""
    up = (("serve", "serve.lm.worker._step"), ("generation", "generation.lm.rows.step"))
    into_training = up + (("training", "training.lm.data.pack"),)
    piece = up + (("nn", "nn.layers.forward"), ("generation", "generation.lm.rowwise.__call__"),
                  ("nn", "nn.ffn.gelu_tanh"))
    fine = up + (("nn", "nn.lm.model.features"), ("base", "base.checks.check"))
    back = up + (("nn", "nn.lm.model.features"), ("generation", "generation.lm.rows.hook"))
    callback = up + (("serve", "serve.lm.chat.<lambda>"),)
    assert faults([fine, back]) == []
    assert faults([callback]) == [
        "enters serve beneath generation: serve.lm.worker._step > generation.lm.rows.step"
        " > serve.lm.chat.<lambda>"]
    assert faults([into_training]) == [
        "enters training beneath generation: serve.lm.worker._step > generation.lm.rows.step"
        " > training.lm.data.pack"]
    assert faults([piece]) == [
        "goes down again after climbing back: serve.lm.worker._step > generation.lm.rows.step"
        " > nn.layers.forward > generation.lm.rowwise.__call__ > nn.ffn.gelu_tanh"]
