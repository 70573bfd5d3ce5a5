"""An OPUS-MT (Marian) model in the static page, as a person meets it in Chromium at 1440 and 390 px: offered
beside ours with its size, nothing of it fetched until it is chosen and used, where it comes from and its
licence said; picked, a sentence typed and Enter pressed: the translation MarianTokenizer decodes, the byte
bar, every head, the tour and the step player; a second visit downloads nothing; a failed download says
which file and why, and Enter again translates."""
from __future__ import annotations

import atexit
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

pytest.importorskip("transformers")  # builds the tiny random Marian folder (a development requirement)

from tests.browser_fixtures import ARTIFACTS, check_chromium, chromium  # noqa: E402
from tests.model.test_marian import build_marian  # noqa: E402
from tests.web.test_web_fixtures import ROOT, nginx_server, open_site, watch  # noqa: E402
from tests.web.test_web_marian_site import checkpoints  # noqa: E402
from tests.web.test_web_robust import WATCH_STATUS, requests_of  # noqa: E402
from web.serve import node_modules  # noqa: E402

pytestmark = pytest.mark.browser
NAME = "opus-mt-de-en"
TEXT = "Zwei Hunde spielen im Schnee."
LAYERS, HEADS = 2, 4
FAILING = re.compile(rf".*/models/{NAME}/decoder\.onnx$")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """python -m web.build --out SITE with one of ours and a tiny random Marian (no model card: no licence)."""
    check_chromium()
    node_modules()
    tmp = tmp_path_factory.mktemp("marian-page")
    folder = build_marian(tmp / "hf" / NAME, layers=LAYERS, heads=HEADS, eos_bias=2.5)
    out = Path(tempfile.mkdtemp(prefix="web-marian-site-"))  # readable by nginx's worker, as web/serve.py's
    os.chmod(out, 0o755)
    atexit.register(shutil.rmtree, out, True)
    subprocess.run([sys.executable, "-m", "web.build", "--out", str(out), "--checkpoints", str(checkpoints(tmp)),
                    "--marian", str(folder)], cwd=ROOT, check=True)
    from transformers import MarianMTModel, MarianTokenizer
    import torch
    tok = MarianTokenizer.from_pretrained(folder)
    meta = json.loads((out / "models" / NAME / "meta.json").read_text(encoding="utf-8"))
    src = tok(TEXT, return_tensors="pt")
    budget = min(100, meta["max_len"] - 1, 2 * src.input_ids.size(1) + 10)  # the page's step budget
    with torch.inference_mode():
        ids = MarianMTModel.from_pretrained(folder).eval().generate(**src, num_beams=1, do_sample=False,
                                                                    max_new_tokens=budget)[0]
    return out, meta, tok.decode(ids, skip_special_tokens=True)


@pytest.fixture(scope="module")
def browser():
    with chromium() as b:
        yield b


def pick_and_translate(page, text: str = TEXT, done: str = "✓ translated") -> None:
    """The OPUS-MT model picked in the direction list, ``text`` typed, Enter pressed."""
    page.select_option("#dir", NAME)
    page.fill("#text", text)
    page.evaluate("document.getElementById('status').textContent = ''")
    page.press("#text", "Enter")
    page.wait_for_function(f"document.getElementById('status').textContent.startsWith({done!r})")


def ours_only(paths) -> bool:
    return not any(f"/models/{NAME}/" in p for p in paths)


@pytest.mark.parametrize("size", [(1440, 900), (390, 844)])
def test_pick_the_opus_mt_model_type_enter_tour_and_step_player(built, browser, size, tmp_path):
    out, meta, reference = built
    log = tmp_path / "sent.log"
    with nginx_server(out, log=log) as base:
        context = browser.new_context(viewport={"width": size[0], "height": size[1]})
        context.add_init_script(WATCH_STATUS)
        foreign = watch(context, base)
        page = context.new_page()
        page.set_default_timeout(240_000)
        open_site(page, base + "/index.html")
        page.wait_for_function("window.explorer.modelReady !== undefined")
        label = page.locator(f"#dir option[value='{NAME}']").inner_text()
        total = sum(n for f, n in meta["bytes"].items() if not f.startswith("vendor/"))
        assert label == f"German → English · OPUS-MT ({total / 1e6:.1f} MB)"
        assert page.locator("#model-about").is_hidden()
        assert ours_only(p for p, _ in requests_of(log)), "nothing of the OPUS-MT model before it is chosen"

        page.select_option("#dir", NAME)
        about = page.inner_text("#model-about")
        assert "OPUS-MT" in about and NAME in about and "licence: see the model's page" in about
        assert f"{total / 1e6:.1f} MB" in about
        page.evaluate("window.__status.length = 0")
        pick_and_translate(page)
        assert page.inner_text("#translation").strip() == reference  # MarianTokenizer.decode of generate's ids
        seen = page.evaluate("window.__status")
        bars = [s["bar"] for s in seen if s["bar"] and s["bar"][0]]
        assert bars and bars[-1] == [total, total], bars[-3:]  # the byte bar, up to the model's whole size
        assert page.evaluate("document.querySelector('#grid')._fullData.length") == LAYERS * HEADS
        assert page.locator("#model-about").is_visible()

        stops = page.locator("#tour li").all_inner_texts()
        assert len(stops) == 11 and "enters the encoder as" in stops[0] and "needs the server" in stops[5]  # post-norm
        page.click("#tour li[data-stop='3'] h3")
        assert "open" in page.get_attribute("#tour li[data-stop='3']", "class")

        page.locator("#pl-next").scroll_into_view_if_needed()
        page.click("#pl-next")
        page.wait_for_function("document.getElementById('player').dataset.step === '1'")
        assert page.inner_text("#pl-step").startswith("step 1 of ")
        assert reference.startswith(page.inner_text("#pl-prefix").split("  ·  ")[0].strip()[:1])
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")
        page.screenshot(path=str(ARTIFACTS / f"web-marian-{size[0]}.png"), full_page=True)

        page.wait_for_function(f"(document.body.dataset.offline || '').split(' ').includes('{NAME}')")
        cold = requests_of(log)
        assert f"/models/{NAME}/weights.bin" in {p for p, _ in cold}
        page.reload()
        page.wait_for_function("window.explorer.modelReady !== undefined")
        pick_and_translate(page)
        assert page.inner_text("#translation").strip() == reference
        warm = requests_of(log)[len(cold):]
        context.close()
    assert {p for p, _ in warm} <= {"/index.html", "/sw.js"}, warm  # the second visit downloads nothing
    assert foreign == []


def test_a_failed_download_says_which_file_and_enter_again_translates(built, browser):
    out, meta, reference = built
    with nginx_server(out) as base:
        context = browser.new_context(viewport={"width": 1440, "height": 900}, service_workers="block")
        page = context.new_page()
        page.set_default_timeout(240_000)
        errors = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        open_site(page, base + "/index.html")
        page.wait_for_function("window.explorer.modelReady !== undefined")
        context.route(FAILING, lambda r: r.fulfill(status=503, body="busy"))
        pick_and_translate(page, done="✗")
        notice = page.inner_text("#notices")
        assert f"the download of {NAME}/decoder.onnx failed (HTTP 503)" in notice and "try again" in notice, notice
        assert page.locator("#load-bar").is_hidden()
        page.screenshot(path=str(ARTIFACTS / "web-marian-failed.png"), full_page=True)
        context.unroute(FAILING)
        page.press("#text", "Enter")
        page.wait_for_function("document.getElementById('status').textContent.startsWith('✓ translated')")
        assert page.inner_text("#translation").strip() == reference and page.inner_text("#notices") == ""
        context.close()
    assert errors == []
