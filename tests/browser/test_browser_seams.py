"""The seams matrix (a real browser, 1440×900): for every view that shows one head, and for every selection
field it reads, the field changed in the selection bar shows in that view's figure — its title names the new
value and its data is redrawn — and, where the view has a picker of its own, a pick there moves the bar.

A new view that shows one head joins by adding a row to SEAMS."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

import pytest

from tests.browser_fixtures import ARTIFACTS, WAIT, load, new_page, pick as _pick, pick_kind
# the same app (de-en and en-de tiny checkpoints) and browser, one per module
from tests.browser.test_browser_select import _tab, app_url  # noqa: F401
from viz.common import layer_head

pytestmark = pytest.mark.browser
CROSS, DEC_SELF = "Decoder cross-attention", "Decoder masked self-attention"
# what the figure says and shows, read in one step (a redraw replaces the element)
READ_JS = """(s) => {
  const gd = document.querySelector(s + ' .js-plotly-plot');
  if (!gd || !gd.layout || !gd.data) return null;
  const t = gd.layout.title;
  return [typeof t === 'string' ? t : (t && t.text) || '',
          JSON.stringify(gd.data)];
}"""


def _open_maps(page):
    _tab(page, "Attention")
    page.locator("#attn-view label", has_text="One head").first.click()


def _open_compare(page):
    _tab(page, "Masks & interventions")
    page.locator("#compare-btn").click()


def _open_pair(page):
    _tab(page, "Analysis & export")
    _tab(page, "Two sentences")
    page.locator("#pair-btn").click()


def _open_profiles(page):
    _tab(page, "Analysis & export")


def _open_alignment(page):
    _tab(page, "Attention")
    _tab(page, "Alignment")
    page.locator("#align-mode label", has_text="One head").first.click()


def _open_inside(page):
    _tab(page, "Computation")
    _tab(page, "Inside one head")


def _pick_profile(page):
    _pick(page, "#prof-pick", "cross L1 H3")


@dataclass(frozen=True)
class Seam:
    view: str
    open: Callable          # (page) -> None: as a person opens it, the bar on cross-attention, layer 0, head 0
    plot: str               # the view's figure
    fields: tuple           # the selection fields it reads, changed in the bar in this order
    pick: Callable | None = None   # its own picker: sets cross-attention, layer 1, head 3, which the bar follows


SEAMS = [
    Seam("Attention → Maps, one head", _open_maps, "#attn-plot", ("kind", "layer", "head")),
    Seam("Masks & interventions → the comparison", _open_compare, "#cmp-maps", ("kind", "layer", "head")),
    Seam("Analysis → Two sentences", _open_pair, "#pair-plot", ("kind", "layer", "head")),
    Seam("Analysis → Head profiles, a head's map", _open_profiles, "#prof-head-plot", ("kind", "layer", "head"),
         pick=_pick_profile),
    Seam("Attention → Alignment, one head", _open_alignment, "#align-plot", ("layer", "head")),
    Seam("Computation → Inside one head", _open_inside, "#head-comp", ("kind", "layer", "head")),
]
# each field: how the bar changes it, and what the view's title must then say (with the fields set so far)
CHANGES = {"kind": lambda page: pick_kind(page, DEC_SELF), "layer": lambda page: _pick(page, "#attn-layer", "layer 1"),
           "head": lambda page: _pick(page, "#attn-head", "head 2")}


def _expected(seam: "Seam", fields_set: set) -> list[str]:
    layer, head = (1 if "layer" in fields_set else 0), (2 if "head" in fields_set else 0)
    kind = [DEC_SELF if "kind" in fields_set else CROSS] if "kind" in seam.fields else []
    return kind + [layer_head(layer, head)]


def _wait_figure(page, seam: Seam, want: list[str], before_data: str | None) -> str:
    """The figure's data once its title holds every string of ``want`` (and its data differs from
    ``before_data``, where given); a clear failure naming the view otherwise."""
    try:
        page.wait_for_function(
            f"([s, want, before]) => {{ const r = ({READ_JS})(s);"
            " return !!r && want.every(w => r[0].includes(w)) && (before === null || r[1] !== before); }",
            arg=[seam.plot, want, before_data], timeout=WAIT)
    except Exception:
        got = page.evaluate(READ_JS, seam.plot)
        pytest.fail(f"{seam.view}: the figure never showed {want} (title now: {got and got[0]!r})")
    return page.evaluate(READ_JS, seam.plot)[1]


def _bar(page) -> tuple[str, int, int]:
    kind = page.locator("#attn-kind input").first.input_value()
    layer, head = (int(re.search(r"\d+", page.locator(f"#attn-{c} input").first.input_value()).group())
                   for c in ("layer", "head"))
    return kind, layer, head


@pytest.mark.parametrize("seam", SEAMS, ids=[s.plot.strip("#") for s in SEAMS])
def test_every_field_changed_in_the_bar_shows_in_the_view(browser, app_url, seam):
    page = load(new_page(browser), app_url)
    pick_kind(page, CROSS)
    seam.open(page)
    data = _wait_figure(page, seam, _expected(seam, set()), None)
    done: set = set()
    for field in seam.fields:
        CHANGES[field](page)
        done.add(field)
        data = _wait_figure(page, seam, _expected(seam, done), data)
    page.evaluate("(s) => document.querySelector(s).scrollIntoView({block: 'end', behavior: 'instant'})", seam.plot)
    page.screenshot(path=str(ARTIFACTS / f"seam-{seam.plot.strip('#')}.png"), full_page=False)  # the sticky bar above
    if seam.pick is not None:
        seam.pick(page)
        page.wait_for_function("() => /head 3/.test(document.querySelector('#attn-head input').value)"
                               " && /layer 1/.test(document.querySelector('#attn-layer input').value)", timeout=WAIT)
        assert _bar(page) == (CROSS, 1, 3)
        _wait_figure(page, seam, [CROSS, layer_head(1, 3)], data)
    page.close()
