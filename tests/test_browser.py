"""A real browser (Debian's Chromium driven by Playwright) against the launched app.

Screenshots are saved to test-artifacts/ (or $ARTIFACTS_DIR) as evidence of what a person sees.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.app_fixtures import launch, make_checkpoint

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ARTIFACTS = Path(os.environ.get("ARTIFACTS_DIR", "test-artifacts"))


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    if CHROMIUM is None:  # CI installs it; a missing browser is a failure, not a skip
        pytest.fail("Debian's chromium is not installed (apt-get install -y chromium); .ci/run installs it")
    from playwright.sync_api import sync_playwright
    root = tmp_path_factory.mktemp("checkpoints")
    make_checkpoint(root / "de-en", "de", "en", seed=0)
    make_checkpoint(root / "en-de", "en", "de", seed=1)
    demo, url = launch(root)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        pg = browser.new_page(viewport={"width": 1400, "height": 1000})
        dialogs = []
        pg.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        pg.goto(url)
        pg.wait_for_selector("#input-text textarea", timeout=60_000)
        pg.dialogs = dialogs
        yield pg
        browser.close()
    demo.close()


def _status(page) -> str:
    el = page.locator("#run-status")
    return el.inner_text() if el.count() else ""


def _wait_done(page, before: str = ""):
    """Wait for the run's completion signal: "✓ … run <id>" with an id other than ``before``'s.

    The translation box fills token by token while streaming, so a non-empty box is no signal."""
    page.wait_for_function(
        "(before) => { const e = document.querySelector('#run-status');"
        " const t = e ? e.innerText.trim() : ''; return t.startsWith('✓') && t !== before.trim() }",
        arg=before, timeout=90_000)


def _translate(page, text):
    page.get_by_role("tab", name="Translate").click()
    box = page.locator("#input-text textarea")
    box.fill(text)
    before = _status(page)
    page.locator("#translate-btn").click()
    _wait_done(page, before)
    return page.locator("#translation textarea").input_value()


def test_translate_renders_text_and_heatmaps(page):
    out = _translate(page, "Ein Mann fährt mit dem Fahrrad durch die Stadt.")
    assert out.strip()
    page.get_by_role("tab", name="Attention maps").click()
    page.wait_for_selector('#attn-plot [data-testid="plotly"] .main-svg', timeout=60_000)
    assert page.locator('#attn-plot [data-testid="plotly"]').count() >= 1
    # the heatmap's axes carry the source tokens
    assert "Fahrrad" in page.locator("#attn-plot").inner_text() or \
        "Fahrrad" in page.locator("#attn-plot").inner_html()
    page.screenshot(path=str(ARTIFACTS / "attention.png"), full_page=True)


def test_step_view_and_compare_render(page):
    _translate(page, "Zwei Hunde spielen im Schnee.")
    page.get_by_role("tab", name="Step by step").click()
    page.wait_for_selector("#step-slider input", timeout=30_000)
    page.wait_for_selector('#step-topk [data-testid="plotly"] .main-svg', timeout=60_000)
    assert page.locator("#step-slider").is_visible()
    page.screenshot(path=str(ARTIFACTS / "steps.png"), full_page=True)
    page.get_by_role("tab", name="Masks & compare").click()
    page.locator("#tog-positional input[type=checkbox]").uncheck()
    page.locator("#compare-btn").click()
    page.wait_for_selector('#cmp-maps [data-testid="plotly"] .main-svg', timeout=60_000)
    assert page.locator('#cmp-maps [data-testid="plotly"]').count() == 1
    page.screenshot(path=str(ARTIFACTS / "compare.png"), full_page=True)


def test_script_in_input_is_inert(page):
    payload = '<img src=x onerror="alert(1)"><script>alert(2)</script>'
    _translate(page, payload)
    page.get_by_role("tab", name="Attention maps").click()
    page.wait_for_selector('#attn-plot [data-testid="plotly"] .main-svg', timeout=60_000)
    page.wait_for_timeout(500)
    assert page.dialogs == []
    assert page.locator("img[src=x]").count() == 0
    page.screenshot(path=str(ARTIFACTS / "script-input.png"), full_page=True)


def test_deep_link_alignment_and_beam_tree_render(page):
    """?text=…&model=…&beam=… pre-fills and runs; the alignment lines and the beam tree draw plotly figures."""
    from urllib.parse import urlencode
    base = page.url.split("?")[0]
    text = "Zwei Hunde spielen im Schnee."
    page.goto(base + "?" + urlencode({"text": text, "model": "de-en", "beam": 3}))
    page.wait_for_selector("#input-text textarea", timeout=60_000)
    _wait_done(page)
    assert page.locator("#input-text textarea").input_value() == text
    page.get_by_role("tab", name="Alignment").click()
    page.wait_for_selector('#align-plot [data-testid="plotly"] .main-svg', timeout=60_000)
    assert page.locator("#align-plot .sankey").count() >= 1
    page.screenshot(path=str(ARTIFACTS / "alignment.png"), full_page=True)
    page.get_by_role("tab", name="Beam tree").click()
    page.wait_for_selector('#beam-plot [data-testid="plotly"] .main-svg', timeout=60_000)
    page.wait_for_function("() => document.querySelector('#beam-plot .scatterlayer .trace') !== null",
                           timeout=60_000)
    assert "Chosen" in page.locator("#beam-md").inner_text()
    page.screenshot(path=str(ARTIFACTS / "beam-tree.png"), full_page=True)
    page.goto(base)  # leave the page as the other tests expect it
    page.wait_for_selector("#input-text textarea", timeout=60_000)


def test_hostile_text_is_inert_in_every_tab(page):
    """An `<img onerror>` / `<script>` / `<svg onload>` sentence, opened as a deep link whose model is a path:
    the model falls back to a discovered one, and in every visible tab (hovering a heatmap, opening the
    source-token picker, running Compare) no dialog fires and no element is injected."""
    from urllib.parse import urlencode
    base = page.url.split("?")[0]
    payload = ('<img src=x onerror=alert(1)> Ein <script>window.__xss=1</script> Mann '
               '<svg onload="window.__xss=2"> y</b><i>z')
    probe = """() => ({
        xss: window.__xss === undefined ? null : window.__xss,
        handlers: document.querySelectorAll('[onerror], [onload], img[src=x], svg[onload]').length,
        scripts: [...document.querySelectorAll('script')].filter(s => /__xss|alert\\(1\\)/.test(s.textContent)).length,
        italics: [...document.querySelectorAll('i')].filter(e => e.textContent.startsWith('z')).length})"""
    page.goto(base)
    page.wait_for_selector("#input-text textarea", timeout=60_000)
    clean = page.evaluate(probe)
    assert clean["xss"] is None and clean["scripts"] == 0 and clean["italics"] == 0

    page.goto(base + "?" + urlencode({"text": payload, "model": "../../etc/passwd", "beam": "1e999"}))
    page.wait_for_selector("#input-text textarea", timeout=60_000)
    _wait_done(page)
    page.wait_for_function("() => (document.querySelector('#src-chips') || {}).innerText?.includes('onerror')",
                           timeout=60_000)
    assert page.locator("#input-text textarea").input_value() == payload
    assert "German" in page.locator("#direction").inner_text() or \
        page.locator("#direction input").input_value().startswith("German")
    assert "<img" in page.locator("#src-chips").inner_text() or "img" in page.locator("#src-chips").inner_text()

    tabs = [t for t in page.get_by_role("tab").all_inner_texts() if t.strip()]
    assert {"Translate", "Attention maps", "Step by step", "Masks & compare"} <= set(tabs)
    for name in tabs:
        page.get_by_role("tab", name=name, exact=True).click()
        if name == "Attention maps":
            page.wait_for_selector('#attn-plot [data-testid="plotly"] .main-svg', timeout=60_000)
            page.locator("#attn-plot .nsewdrag").first.hover()  # draws a hover label from the tick text
        elif name == "Step by step":
            page.wait_for_selector('#step-cross [data-testid="plotly"] .main-svg', timeout=60_000)
            page.locator("#step-cross .nsewdrag").first.hover()
        elif name == "Masks & compare":
            page.locator("#compare-btn").click()
            page.wait_for_selector('#cmp-maps [data-testid="plotly"] .main-svg', timeout=60_000)
            page.locator("#tog-src input").first.click()  # the source-token picker lists the raw tokens
            page.wait_for_timeout(300)
            page.keyboard.press("Escape")
        page.wait_for_timeout(700)
        assert page.dialogs == [], name
        assert page.evaluate(probe) == clean, name
    page.screenshot(path=str(ARTIFACTS / "hostile-input.png"), full_page=True)
    page.goto(base)  # leave the page as the other tests expect it
    page.wait_for_selector("#input-text textarea", timeout=60_000)


def test_busy_message_past_the_queue_bound(page, tmp_path, monkeypatch):
    """A full queue answers the browser with Gradio's "busy, try again" toast, not an error page."""
    import threading

    from gradio_client import Client

    from model import explore

    for t in threading.enumerate():  # another app's warm-up must not run into the blocked model call
        if t.name == "warm-up":
            t.join(60)
    make_checkpoint(tmp_path / "de-en", "de", "en")
    demo, url = launch(tmp_path, warm=False, max_queue=1)
    entered, release = threading.Event(), threading.Event()
    orig = explore.run

    def slow(*a, **k):
        entered.set()
        release.wait(60)
        return orig(*a, **k)

    monkeypatch.setattr(explore, "run", slow)
    busy = page.context.browser.new_page()
    try:
        c = Client(url, verbose=False)
        jobs = [c.submit("Zwei Hunde.", "de-en", 1, 4, api_name="/translate")]
        assert entered.wait(60)
        jobs.append(c.submit("Zwei Hunde.", "de-en", 1, 4, api_name="/translate"))
        for _ in range(300):
            if len(demo._queue) >= 1:
                break
            page.wait_for_timeout(100)
        busy.goto(url)
        busy.wait_for_selector("#input-text textarea", timeout=60_000)
        busy.locator("#input-text textarea").fill("Zwei Hunde spielen im Schnee.")
        busy.locator("#translate-btn").click()
        busy.get_by_text("This application is currently busy. Please try again.").first.wait_for(timeout=30_000)
        body = busy.locator("body").inner_text()
        assert "Traceback" not in body and "Queue is full. Max size" not in body
        busy.screenshot(path=str(ARTIFACTS / "busy.png"), full_page=True)
    finally:
        release.set()
        busy.close()
    for job in jobs:  # the accepted requests still complete
        assert job.result(timeout=60)["src_tokens"][0] == "<bos>"
    demo.close()
