"""The GPT explorer page in headless Chromium (Playwright) against the LM app on 127.0.0.1:
the prompt's tokens, an attention map per layer and head, next-token bars that follow
temperature / top-k / top-p as the model's own softmax says, the logit lens, a step, and no
request beyond this server."""

from __future__ import annotations

import math
import os
import shutil
from pathlib import Path

import pytest
import torch

from decoderkit.serve.lm.app import create_lm_app
from decoderkit.serve.lm.engines import from_lm
from serve.lm.lm_serving import LiveServer, tiny_lm

playwright = pytest.importorskip("playwright.sync_api")
CHROMIUM = shutil.which("chromium")
if CHROMIUM is None:  # reported as SKIPPED, never passed
    pytest.skip("chromium is not installed (Debian: sudo apt-get install chromium)",
                allow_module_level=True)
ARGS = ["--no-sandbox", "--headless", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]
PROMPT = "To be, or not"
SHOT = Path(__file__).parents[3] / "docs" / "lm_explorer.png"


@pytest.fixture(scope="module")
def served():
    model, tokenizer = tiny_lm()
    return from_lm(model, tokenizer, "tiny")


@pytest.fixture(scope="module")
def page(served):
    with LiveServer(create_lm_app(served)) as server, playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": 1200, "height": 1000})
        page.requested = []
        page.on("request", lambda r: page.requested.append(r.url))
        page.goto(server.url + "/")
        page.url_root = server.url
        yield page
        browser.close()


def bars(page) -> list[float]:
    page.wait_for_timeout(50)
    return [float(x) for x in page.locator("#bars .muted").all_inner_texts()]


def test_tokens_attention_bars_lens_and_a_step(page, served):
    page.fill("#text", PROMPT)
    page.click("#go")
    page.wait_for_selector("#result:not([hidden])", timeout=60_000)
    ids = served.tokenizer.encode(PROMPT)
    T, c = len(ids), served.config
    assert page.locator("#tokens .chip").count() == T
    assert page.locator("#self-heatmap .cell").count() == T * T
    assert page.locator("#self-heatmap .cell.empty").count() == T * (T - 1) // 2
    assert page.locator("#layer option").count() == c.n_layers
    assert page.locator("#head option").count() == c.n_heads
    assert page.locator("#lens tbody tr").count() == c.n_layers
    with torch.inference_mode():
        p = served.model(torch.tensor([ids]))[0, -1].double().softmax(-1)
    best = p.topk(20).values.tolist()
    shown = bars(page)
    assert len(shown) == 20 and max(abs(a - b) for a, b in zip(shown, best, strict=True)) < 2e-4
    page.fill("#topk", "3")
    page.dispatch_event("#topk", "input")
    three = bars(page)
    assert len(three) == 3 and abs(three[0] - best[0] / sum(best[:3])) < 2e-4
    page.fill("#topk", "0")
    page.dispatch_event("#topk", "input")
    page.eval_on_selector("#temperature", "e => { e.value = 0; e.dispatchEvent(new Event("
                                          "'input')) }")
    assert bars(page) == [1.0]  # greedy: the argmax alone
    page.eval_on_selector("#temperature", "e => { e.value = 0.5; e.dispatchEvent(new Event("
                                          "'input')) }")
    tempered = (p.log() / 0.5).softmax(-1).topk(20).values.tolist()
    assert max(abs(a - b) for a, b in zip(bars(page), tempered, strict=True)) < 2e-4
    assert not math.isclose(tempered[0], best[0])
    if os.environ.get("DECODERKIT_SCREENSHOT"):  # make the docs picture
        page.screenshot(path=str(SHOT), full_page=True)
    page.eval_on_selector("#temperature", "e => { e.value = 0; e.dispatchEvent(new Event("
                                          "'input')) }")
    page.click("#step")
    page.wait_for_function(f"document.querySelectorAll('#tokens .chip').length === {T + 1}",
                           timeout=60_000)
    assert page.locator("#tokens .chip.new").count() == 1
    greedy = int(p.argmax())
    assert page.locator("#tokens .chip.new").inner_text() == served.tokenizer.decode([greedy])
    assert all(url.startswith(page.url_root) for url in page.requested)
    assert page.locator("#status").inner_text() == ""
