"""What a screen reader hears from Gradio's live status regions while the page loads and translates: words,
never an untranslated key such as "common.complete" (Gradio's English table lacks it)."""
from __future__ import annotations

import re

import pytest

from tests.app_fixtures import launch, make_checkpoint
from tests.browser_fixtures import WAIT, check_chromium, chromium, load, new_page

pytestmark = pytest.mark.browser
# every text any live region (role=status / aria-live) is given, recorded from the page's first script on
RECORD = """() => { window.__heard = [];
  new MutationObserver(ms => { for (const m of ms) {
    const e = m.target.nodeType === 1 ? m.target : m.target.parentElement;
    const live = e && e.closest('[aria-live], [role=status]');
    if (live && live.textContent.trim()) window.__heard.push(live.textContent.trim()); } })
  .observe(document, {subtree: true, childList: true, characterData: true}); }"""


@pytest.fixture(scope="module")
def url(tmp_path_factory):
    check_chromium()
    root = tmp_path_factory.mktemp("checkpoints")
    make_checkpoint(root / "de-en", "de", "en", seed=0)
    demo, url = launch(root, warm=False)
    try:
        yield url
    finally:
        demo.close()


def test_a_screen_reader_hears_words_not_keys(url):
    with chromium() as browser:
        page = new_page(browser)
        page.add_init_script(f"({RECORD})()")
        load(page, url)
        page.locator("#translate-btn").first.click()
        # the event's end is announced: in words, or (before) as the key itself
        page.wait_for_function("() => window.__heard.some(t => t === 'Done' || /^[a-z_]+(\\.[a-z_]+)+$/.test(t))",
                               timeout=WAIT)
        heard = page.evaluate("() => window.__heard")
        keys = [t for t in heard if re.fullmatch(r"[a-z_]+(\.[a-z_]+)+", t)]
        assert not keys and "Done" in heard, heard
