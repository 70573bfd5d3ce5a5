"""The page on a cross-origin isolated host (the headers a static Space's README asks for): ONNX Runtime runs
on half the cores, up to 4 (the browser told it has 4 cores: 2 threads), and its numbers are the engine's as on one thread: the example's run stored at build time against
the page's own run of it, the same tokens and top 10 at every step, patterns within 1e-4, probabilities within
1e-5. Without the headers the page says it runs on one thread."""
from __future__ import annotations

import re

import pytest

from tests.browser_fixtures import check_chromium, chromium, new_page
from tests.web.test_web_fixtures import guard, nginx_server, open_site, site
from tests.web.test_web_page import COMPARE_FIRST, translate_in_page
from web.build import SPACE_README

pytestmark = pytest.mark.browser
CORES = 4  # what the page is told it has, whatever this machine has


def _run(browser, base: str) -> tuple[dict, str, bool]:
    """The first visit's numbers, then a reload's timing line: the service worker's kept copies must keep
    the isolation headers, or the reload's threads could not start."""
    page = new_page(browser)
    guard(page, base)
    page.context.new_cdp_session(page).send("Emulation.setHardwareConcurrencyOverride", {"hardwareConcurrency": CORES})
    open_site(page, base + "/index.html?dir=de-en")
    got = page.evaluate(COMPARE_FIRST)
    page.wait_for_timeout(1500)  # the service worker keeps its copies
    page.reload()
    page.wait_for_function("document.getElementById('status').textContent.startsWith('✓')")
    translate_in_page(page, "de-en", page.input_value("#text"))
    return got, page.inner_text("#timing"), page.evaluate("crossOriginIsolated")


@pytest.mark.parametrize("isolated", [True, False], ids=["isolated", "plain"])
def test_threads_where_the_host_isolates_the_page_with_the_engines_numbers(isolated):
    check_chromium()
    with nginx_server(site(), isolated=isolated) as base, chromium() as browser:
        got, timing, is_isolated = _run(browser, base)
    assert is_isolated == isolated
    assert got["ids"][0] == got["ids"][1] and got["top"] and got["text"][0] == got["text"][1], got
    assert got["worst"] < 1e-4 and got["probs"] < 1e-5, got
    threads = CORES // 2 if isolated else 1
    said = re.search(r"in this browser \((one thread|(\d) threads)\)", timing)
    assert said, timing
    assert (1 if said.group(1) == "one thread" else int(said.group(2))) == threads, timing


def test_the_space_readme_asks_for_the_isolation_headers():
    assert re.search(r"custom_headers:\n  cross-origin-embedder-policy: require-corp\n"
                     r"  cross-origin-opener-policy: same-origin\n", SPACE_README)
