"""The explorer page in headless Chromium (Playwright) against a running ``decoderkit serve``:
it shows the server's translation, a target x source heatmap, hover highlighting, the n best,
and fetches nothing but this server."""

from __future__ import annotations

import shutil

import httpx
import pytest
from serve.serving import Server, batching_server, slow_checkpoint

from decoderkit.training.seq2seq.checkpoint import load_checkpoint

playwright = pytest.importorskip("playwright.sync_api")

CHROMIUM = shutil.which("chromium")
if CHROMIUM is None:  # `make test` installs it where it may; reported as SKIPPED, never passed
    pytest.skip("chromium is not installed (Debian: sudo apt-get install chromium)",
                allow_module_level=True)
ARGS = ["--no-sandbox", "--headless", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]
TEXT = "29 Nov 2026"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = batching_server(tmp_path_factory.mktemp("explorer"))
    yield s
    s.stop()


@pytest.fixture(scope="module")
def browser():
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield browser
        browser.close()


def open_page(browser, server):
    page = browser.new_page(viewport={"width": 1300, "height": 1000})
    page.requested = []
    page.on("request", lambda r: page.requested.append(r.url))
    page.goto(server.url + "/")
    return page


@pytest.fixture(scope="module")
def page(browser, server):
    page = open_page(browser, server)
    yield page
    page.close()


def api(server, **body) -> dict:
    r = httpx.post(server.url + "/v1/translate", json={"inputs": [TEXT], **body}, timeout=60)
    return r.json()["results"][0]


def submit(page, method: str) -> None:
    page.fill("#text", TEXT)
    page.select_option("#method", method)
    page.evaluate("document.getElementById('result').hidden = true")
    page.click("#go")
    page.wait_for_selector("#result:not([hidden])", timeout=60_000)


def test_greedy_translation_heatmaps_hover_and_steps(page, server, tmp_path):
    submit(page, "greedy")
    want = api(server, explain=5)
    assert page.inner_text("#translation") == want["text"]
    T, S = len(want["tokens"]), len(want["source_tokens"])
    assert page.locator("#cross-heatmap .cell").count() == T * S
    assert page.locator("#self-heatmap .cell").count() == T * T
    assert page.locator("#self-heatmap .cell.empty").count() == T * (T - 1) // 2
    assert page.locator("#steps tbody tr").count() == T
    assert page.locator("#tokens .chip").all_inner_texts() == want["tokens"]

    row = T // 2
    assert page.locator("#cross-heatmap .cell.hl").count() == 0
    page.hover(f"#tokens .chip[data-row='{row}']")
    lit = page.locator("#cross-heatmap .cell.hl")
    assert lit.count() >= 1
    assert {lit.nth(i).get_attribute("data-row") for i in range(lit.count())} == {str(row)}
    layer, head = (int(page.input_value(s)) for s in ("#layer", "#head"))
    weights = want["steps"][row]["cross_attention"][layer][head]
    strongest = max(range(S), key=weights.__getitem__)
    assert "hl" in page.locator(f"#source .chip[data-col='{strongest}']").get_attribute("class")
    page.screenshot(path=str(tmp_path / "explorer.png"), full_page=True)
    assert all(url.startswith(server.url) for url in page.requested), page.requested


def test_beam_shows_the_n_best_with_scores(page, server):
    page.fill("#beam", "3")
    page.fill("#nbest-count", "2")
    submit(page, "beam")
    want = api(server, beam=3, n_best=2)
    items = page.locator("#nbest li").all_inner_texts()
    assert len(items) == 2
    for item, hyp in zip(items, want["nbest"], strict=True):
        assert item.startswith(hyp["text"]) and f"({hyp['score']:.3f})" in item
    assert page.inner_text("#translation") == want["text"]


def test_an_engine_without_explain_says_so_and_still_translates(browser, tmp_path):
    pytest.importorskip("ctranslate2")
    from decoderkit.interop.seq2seq.ctranslate2 import export_ctranslate2

    ckpt = load_checkpoint(slow_checkpoint(tmp_path / "ckpt"))
    server = Server(None, "--engine", "ctranslate2", "--model",
                    str(export_ctranslate2(ckpt, tmp_path / "ct2")))
    try:
        page = open_page(browser, server)
        page.wait_for_selector("#lacking:not([hidden])", timeout=60_000)
        lacking = page.inner_text("#lacking")
        assert lacking.startswith("Not available with engine ctranslate2: ")
        assert "explain (" in lacking and "n_best (" in lacking
        assert "engine ctranslate2" in page.inner_text("#model-info")
        assert page.is_disabled("#topk") and page.is_disabled("#nbest-count")
        for method in ("greedy", "beam"):
            submit(page, method)
            want = api(server, beam=4 if method == "beam" else 1)
            assert page.inner_text("#translation") == want["text"] and want["text"]
            assert page.locator("#tokens .chip").all_inner_texts() == want["tokens"] != []
            assert page.is_hidden("#explain-box") and page.inner_text("#status") == ""
        page.close()
    finally:
        server.stop()
