"""The static Space rehearsed: python -m web.build --space writes README.md front matter with sdk: static and
the site; nginx serves it; Chromium, with every other host blocked, translates in each direction, then
reloads with the network off and translates again from what the service worker kept."""
from __future__ import annotations

import json

from tests.browser_fixtures import check_chromium
from tests.web.test_web_fixtures import isolated_chromium, nginx_server, open_site, space, watch

# every shipped direction, in name order, with a word its translation must hold
WANT = {"cs-en": ("Pes běží sněhem.", "dog"), "de-en": ("Ein Hund rennt durch den Schnee.", "dog"),
        "en-cs": ("A dog runs through the snow.", "Pes"), "en-de": ("A dog runs through the snow.", "Hund"),
        "en-fr": ("A dog runs through the snow.", "chien"), "fr-en": ("Un chien court dans la neige.", "dog")}


def test_the_space_folder_is_a_static_space():
    out = space()
    readme = (out / "README.md").read_text(encoding="utf-8")
    front = readme.split("---")[1]
    assert "\nsdk: static\n" in front and "\napp_file: index.html\n" in front
    assert (out / "index.html").is_file() and (out / "sw.js").is_file()
    assert json.loads((out / "models" / "manifest.json").read_text())["directions"] == list(WANT)
    assert not any(p.name in ("node_modules", "__pycache__") for p in out.rglob("*"))


def translate_all(page) -> dict[str, str]:
    return page.evaluate("async (want) => { const out = {}; for (const [d, [t]] of Object.entries(want))"
                         " out[d] = (await window.explorer.translate(d, t)).text; return out; }", WANT)


def test_rehearsal_nginx_every_direction_then_offline():
    check_chromium()
    with nginx_server(space()) as base, isolated_chromium() as browser:
        context = browser.new_context(viewport={"width": 1440, "height": 900})
        foreign = watch(context, base)
        page = context.new_page()
        page.set_default_timeout(240_000)
        open_site(page, base + "/index.html")
        page.wait_for_function("navigator.serviceWorker.controller !== null")
        online = translate_all(page)
        for d, (_, word) in WANT.items():
            assert word in online[d], (d, online[d])
        page.wait_for_function("(n) => (document.body.dataset.offline || '').split(' ').length === n", arg=len(WANT))
        context.set_offline(True)
        page.reload()
        page.wait_for_function("document.getElementById('status').textContent.startsWith('✓')")
        assert translate_all(page) == online
        assert foreign == []
        context.close()
