"""Helpers for the browser tests: Debian's Chromium driven by Playwright, and the app's page opened in it.

Screenshots are saved to test-artifacts/ (or $ARTIFACTS_DIR) as evidence of what a person sees.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from web.serve import CHROMIUM, chromium  # noqa: F401 (one launch for the app's and the static page's tests)

ARTIFACTS = Path(os.environ.get("ARTIFACTS_DIR", "test-artifacts"))
# How long any wait for the page may take (ms). Generous on purpose: a 2-core machine that other work keeps
# busy can take minutes to draw what an idle one draws in seconds, and these tests check what is drawn, not when.
WAIT = 240_000


def check_chromium() -> None:
    """Fail (not skip) without the browser, and make the screenshots' folder."""
    if CHROMIUM is None:  # CI installs it; a missing browser is a failure, not a skip
        pytest.fail("Debian's chromium is not installed (apt-get install -y chromium); .ci/run installs it")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)


def new_page(browser, width: int = 1440, height: int = 900):
    page = browser.new_page(viewport={"width": width, "height": height})
    page.set_default_timeout(WAIT)  # every click, fill and wait without a timeout of its own
    return page


def wait_done(page, before: str = ""):
    """Wait for the run's completion signal: "✓ … run <id>" with an id other than ``before``'s.

    The translation box fills token by token while streaming, so a non-empty box is no signal."""
    page.wait_for_function(
        "(before) => { const e = document.querySelector('#run-status');"
        " const t = e ? e.innerText.trim() : ''; return t.startsWith('✓') && t !== before.trim() }",
        arg=before, timeout=WAIT)


def load(page, url: str):
    """``page`` opened on the app at ``url``, once its first run (translated on load) has landed. The text box
    is only attached, not visible, when a link opens another section."""
    page.goto(url)
    page.wait_for_selector("#input-text textarea", state="attached", timeout=WAIT)
    wait_done(page)
    return page


# A plot is redrawn whenever its figure arrives, and the redraw detaches the old element. So these read or
# scroll what a selector names in one step inside the page, never through an element found earlier (a
# locator's scroll_into_view_if_needed or bounding_box resolves the element, then acts on it later).
BOX_JS = """([sel, scroll]) => {
  const e = document.querySelector(sel);
  if (!e) return null;
  if (scroll) e.scrollIntoView({block: 'center', inline: 'nearest', behavior: 'instant'});
  const r = e.getBoundingClientRect();
  return {x: r.x, y: r.y, width: r.width, height: r.height};
}"""


def box_now(page, sel: str, scroll: bool = False) -> dict:
    """The viewport box of the first element ``sel`` names at this moment (scrolled to the middle of the screen
    first when ``scroll``), found and measured in one step; fails when there is none."""
    box = page.evaluate(BOX_JS, [sel, scroll])
    assert box is not None, f"nothing matches {sel}"
    return box


def scroll_to(page, sel: str) -> None:
    """Bring the first element ``sel`` names on screen, found and scrolled in one step."""
    box_now(page, sel, scroll=True)


def click_head_panel(page, plot_sel: str, fx: float, fy: float) -> None:
    """Click at (fx, fy) of the first panel of the plot under ``plot_sel``, as a person does: once the plot on
    the page has its head-click handler, on screen (a mouse click lands only there), at that plot's position."""
    point = page.wait_for_function(
        """([sel, fx, fy]) => {
          const gd = document.querySelector(sel + ' .js-plotly-plot');
          const panel = gd && gd.__headClick && gd.querySelector('.nsewdrag');
          if (!panel) return null;
          panel.scrollIntoView({block: 'center', inline: 'nearest', behavior: 'instant'});
          const r = panel.getBoundingClientRect();
          return r.width > 0 && r.height > 0 ? [r.x + r.width * fx, r.y + r.height * fy] : null;
        }""", arg=[plot_sel, fx, fy], timeout=WAIT).json_value()
    page.mouse.click(*point)


def pick(page, sel: str, label: str) -> None:
    """Type into a dropdown, click the option that starts with the typed words, and wait until it shows.
    Pressing Enter instead would take whichever option was first while a loaded machine still filtered."""
    box = page.locator(f"{sel} input").first
    box.click()
    page.keyboard.press("Control+A")
    page.keyboard.press("Backspace")
    page.keyboard.type(label)
    words = re.compile("^[\\s✓]*" + re.escape(label) + "(\\s|$)")
    page.locator(f"{sel} [data-testid=dropdown-option]").filter(has_text=words).first.click(timeout=WAIT)
    # a single choice shows in the box; a multiselect's shows as a token beside it
    page.wait_for_function("([s, v]) => document.querySelector(s + ' input').value.startsWith(v)"
                           " || [...document.querySelectorAll(s + ' .token')].some(t => t.innerText.includes(v))",
                           arg=[sel, label], timeout=WAIT)


def pick_kind(page, label: str) -> None:
    """Choose the attention kind in the selection bar's dropdown, as a person does."""
    page.locator("#attn-kind input").first.click()
    page.get_by_role("option", name=label, exact=True).click()


# On a phone, panels side by side stack: no two panels share a height band unless they share a width band.
STACKED_JS = """(sel) => {
  const F = (document.querySelector(sel + ' .js-plotly-plot') || {})._fullLayout;
  if (!F) return false;
  const ax = Object.keys(F).filter(k => /^xaxis\\d*$/.test(k) && !F[k].overlaying && F[k].anchor)
    .map(k => ({x: F[k].domain, y: F['yaxis' + F[k].anchor.slice(1)].domain}));
  const apart = (a, b) => a[1] <= b[0] + 1e-6 || b[1] <= a[0] + 1e-6;
  // no two panels side by side: wherever their heights overlap, so do their widths
  return ax.length > 2 && ax.every(p => ax.every(q => apart(p.y, q.y) || !apart(p.x, q.x)));
}"""
