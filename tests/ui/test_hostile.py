"""Hostile input against the launched app: huge inputs, HTML/script, path-like direction names, odd types,
a flood past the queue bound.

Driven through gradio_client and raw HTTP (what a script can send, not only what the textbox allows).
The browser side (nothing runs, the busy message) is in tests/browser/test_browser.py.
"""
from __future__ import annotations

import html
import json
import re
import sys
import threading
import time
import urllib.request

import httpx
import pytest

from ui import calls, settings

from model.engine import decoding
from gradio_client import Client

import app
import model.families as ckpt_module
from tests.app_fixtures import named, all_strings, launch, make_checkpoint, select, selected
from viz.common import esc
from ui import present

C_OUT = ["cmp_notice", "cmp_stale", "base_chips", "mod_chips", "prob_plot", "cmp_plot", "masks_plot", "kind", "layer", "head"]
DE = "Zwei Hunde spielen im Schnee."
BIG = ("Ein Mann fährt mit dem Fahrrad durch die Stadt. " * 1100)[:50_000]
PAYLOAD = ('Ein <script>alert("x")</script> Mann <img src=x onerror=alert(1)> y</b><i>z '
           '"><svg onload=alert(1)> &lt;b&gt; %{x} <pad>')
OWN_TAGS = re.compile(r"</?(?:b|br|extra)>")  # tags the figure builders write themselves
TRACEBACK = ("Traceback", 'File "', "site-packages", "line ")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile-ckpts")
    make_checkpoint(root / "de-en", "de", "en", seed=0)
    make_checkpoint(root / "en-de", "en", "de", seed=1)
    demo, url = launch(root)
    yield demo, url, root
    demo.close()


def ui_translate(client, text, direction="de-en", max_len=8):
    select(client, "decoder.cross_attn")
    out = client.predict(text, direction, "greedy", 4, max_len, api_name="/translate_stream")
    return named(client, client.src, out)


def plot_json(value) -> dict:
    assert isinstance(value, dict) and value["type"] == "plotly", value
    return json.loads(value["plot"])


def no_traceback(text: str) -> bool:
    return not any(t in text for t in TRACEBACK)


@pytest.fixture
def spy_translate(monkeypatch):
    """Every text that reaches the model (every model call goes through decoding.translate)."""
    seen = []
    orig = decoding.translate

    def spy(lm, text, *a, **k):
        seen.append(text)
        return orig(lm, text, *a, **k)

    monkeypatch.setattr(decoding, "translate", spy)
    return seen


# --------------------------------------------------------------------------- length cap, on the server

def test_length_cap_enforced_on_the_server(client, spy_translate):
    t0 = time.perf_counter()
    out = client.predict(BIG, "de-en", 1, 5, api_name="/translate")
    assert any("50,000" in n and "2,000" in n for n in out["notices"]), out["notices"]
    assert len(out["src_text"]) == present.MAX_INPUT_CHARS and len(out["src_tokens"]) <= 64

    r = ui_translate(client, BIG, max_len=5)  # the streaming UI event, bypassing the textbox
    assert "50,000" in r["notice"] and "2,000" in r["notice"]

    cmp = client.predict(BIG, "de-en", 1, 5, 0, True, True, True, [], [], "cross", 0, 0, api_name="/compare")
    assert any("50,000" in n for n in cmp["notices"])
    ui_translate(client, BIG, max_len=5)  # Compare runs against the current run
    select(client, "decoder.cross_attn")
    ui_cmp = dict(zip(C_OUT, client.predict(0, True, True, True, [], [], api_name="/compare_ui")))
    assert "50,000" in ui_cmp["cmp_notice"] and "2,000" in ui_cmp["cmp_notice"]

    # the work is bounded: only the capped text ever reaches the model
    assert spy_translate and max(len(t) for t in spy_translate) <= present.MAX_INPUT_CHARS
    assert time.perf_counter() - t0 < 120


def test_lone_surrogates_in_raw_json_give_valid_utf8(server):
    url = server[1]
    body = '{"data": ["Ein \\ud800 Mann \\udfff", "de-en", 1, 4, null, false]}'  # valid JSON, not valid UTF-8 text
    r = httpx.post(url + "gradio_api/call/translate", content=body.encode("ascii"),
                   headers={"content-type": "application/json"}, timeout=30)
    assert r.status_code == 200, r.text
    r2 = httpx.get(url + f"gradio_api/call/translate/{r.json()['event_id']}", timeout=60)
    r2.content.decode("utf-8")  # strict
    data = [line[6:] for line in r2.text.splitlines() if line.startswith("data: ")]
    out = json.loads(data[-1])[0]
    assert out["src_text"] == "Ein  Mann " and out["src_tokens"] == ["<bos>", "Ein", "Mann", "<eos>"]
    json.dumps(out, ensure_ascii=False).encode("utf-8")


# --------------------------------------------------------------------------- HTML and script stay text

def check_inert(fig: dict, what: str) -> None:
    for s in all_strings(fig):
        rest = OWN_TAGS.sub("", s)
        assert "<" not in rest, (what, s)  # no tag from a token survives unescaped
    for key, axis in fig.get("layout", {}).items():
        if key.startswith(("xaxis", "yaxis")) and isinstance(axis, dict) and "ticktext" in axis:
            for label in axis["ticktext"]:
                label = re.sub(r"^<b>(.*)</b>$", r"\1", str(label))
                assert esc(html.unescape(label)) == label, (what, key, label)


def test_html_and_script_are_inert_in_every_view(client):
    r = ui_translate(client, PAYLOAD, max_len=8)
    src = [c["token"] for c in r["src_chips"]]
    assert "<" in src and 'alert("x")</script' in src and "y</b><i" in src  # chips carry raw text, shown as text
    assert "<pad>" not in src  # typed "<pad>" is three plain tokens, never the special token
    assert "<script" not in r["notice"] and "<img" not in r["notice"]
    figs = {name: plot_json(r[name]) for name in ("attn_plot", "watch_heads")}
    figs["masks"] = plot_json(client.predict(api_name="/open_interventions")[0])
    select(client, "decoder.cross_attn", query=0)
    figs["norms"] = plot_json(client.predict(32, "0, 1", "encoder", 1, api_name="/open_computation")[1])
    figs["inside_head"] = plot_json(client.predict(api_name="/inside_view")[1])
    figs["residual"], figs["norm_weights"] = map(plot_json, client.predict("decoder", api_name="/residual_view"))
    figs["logit_lens"] = plot_json(client.predict(api_name="/lens_view"))
    gen = client.predict(api_name="/open_generation")
    r["step"] = gen[0]
    for kind in ("encoder.self_attn", "decoder.self_attn", "decoder.cross_attn"):
        for view in ("grid", "head", "mean"):
            select(client, kind, view=view)
            figs[f"{kind}/{view}"] = plot_json(client.predict(api_name="/attention_view")[0])
    n = r["step"]["maximum"] + 1 if isinstance(r["step"], dict) else 2
    for t in range(min(n, 4)):
        out = client.predict(t, api_name="/step_view")
        assert "<script" not in out[1] and "<img" not in out[1]
        for i, f in enumerate(out[3:]):  # strip, top-k, cross, self
            figs[f"step {t}/{i}"] = plot_json(f)
    select(client, "encoder.self_attn")
    ui_cmp = dict(zip(C_OUT, client.predict(12, False, True, True, ["cross L0 H0"], ["1: Ein"],
                                            api_name="/compare_ui")))
    assert "<script" not in ui_cmp["cmp_notice"] and "<img" not in ui_cmp["cmp_notice"]
    for name in ("prob_plot", "cmp_plot", "masks_plot"):
        figs[f"compare/{name}"] = plot_json(ui_cmp[name])
    select(client, "encoder.self_attn", 1, 1)
    figs["compare_maps"] = plot_json(client.predict(api_name="/compare_maps"))
    select(client, "decoder.cross_attn")
    figs["masks"] = plot_json(client.predict(12, True, True, True, [], [], api_name="/masks")[0])
    # the analysis tabs that echo tokens
    ui_translate(client, PAYLOAD, max_len=8)
    sel = ("decoder.cross_attn", 1, 0, 0, None, "words", "grid", "shared")  # the shared selection, then the view's own
    figs["rollout"] = plot_json(selected(client, sel, "all", api_name="/rollout_view"))
    figs["alignment"] = plot_json(selected(client, sel, "layer", api_name="/alignment_view"))
    md, beam_fig, table, _ = selected(client, sel, 2, api_name="/beam_tree")
    assert "<script" not in md and "<img" not in md
    figs["beam"] = plot_json(beam_fig)
    client.predict("encoder.self_attn", 0, 0, 0, None, "words", "grid", "shared", api_name="/selection")
    md, pair_fig = client.predict(PAYLOAD, "Ein <b>Mann</b>", "de-en", api_name="/pair_view")
    assert "<script" not in md and "<b>" not in md
    figs["pair"] = plot_json(pair_fig)

    for what, fig in figs.items():
        check_inert(fig, what)
    enc = figs["encoder.self_attn/head"]["layout"]
    for axis in ("xaxis", "yaxis"):  # the escaped form is what is shown (Plotly renders the entities)
        labels = [lab.rstrip("₀₁₂₃₄₅₆₇₈₉") for lab in enc[axis]["ticktext"]]  # repeats carry their position
        assert {"&lt;", "alert(&#34;x&#34;)&lt;/script", "y&lt;/b&gt;&lt;i", "lt;b&amp;gt"} <= set(labels), labels
    hover = [s for f in figs.values() for s in all_strings(f) if "%{" in s]
    assert hover and not any("alert" in s for s in hover)  # hover text reads the escaped tick labels


def test_exported_figure_html_is_inert(client):
    ui_translate(client, PAYLOAD, max_len=8)
    client.predict("encoder.self_attn", 0, 0, 0, None, "words", "head", "shared", api_name="/selection")
    for which in ("attention", "alignment", "rollout"):
        out = client.predict(which, "all", "layer", "entropy", "HTML", api_name="/export_figure")
        page = open(out if isinstance(out, str) else out["path"], encoding="utf-8").read()
        for raw in ('alert("x")</script', "<img src", "<svg onload", "y</b><i", "onerror=alert"):
            assert raw not in page, (which, raw)
        assert "onerror" in page and ("&lt;" in page or "\\u0026lt;" in page), which  # the tokens are there, escaped


# --------------------------------------------------------------------------- no user value becomes a path

HOSTILE_DIRECTIONS = ["../../etc", "/etc/passwd", "de-en/../x", "de-en/..", "..", ".", "de-en\x00",
                      "checkpoints/de-en", "~/.ssh/id_rsa", "C:\\Windows\\win.ini", "file:///etc/passwd",
                      "de-en " * 5000]
_AUDIT = {"on": False, "events": []}


def _audit(event, args):
    if _AUDIT["on"] and event in ("open", "os.listdir", "os.scandir", "os.chdir", "os.remove", "os.rename",
                                  "os.mkdir", "shutil.rmtree", "shutil.copyfile", "glob.glob", "pathlib.Path.glob"):
        _AUDIT["events"].append((event, str(args[0]) if args else ""))


sys.addaudithook(_audit)  # permanent for the process, but records only while a test switches it on


@pytest.fixture
def no_loading(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError(f"a checkpoint load was attempted after start-up: {a!r}")

    for mod, name in ((ckpt_module, "load_all"), (ckpt_module, "load_checkpoint"), (calls, "load_registry")):
        monkeypatch.setattr(mod, name, refuse)
    _AUDIT["events"].clear()
    _AUDIT["on"] = True
    yield _AUDIT["events"]
    _AUDIT["on"] = False


@pytest.mark.parametrize("direction", HOSTILE_DIRECTIONS, ids=lambda d: repr(d[:20]))
def test_direction_values_never_become_paths(server, client, no_loading, direction):
    demo, url, root = server
    names = sorted(demo.registry.models)
    calls = [
        ("/translate", (DE, direction, 1, 4), "Unknown direction"),
        ("/compare", (DE, direction, 1, 4, 0, True, True, True, [], [], "cross", 0, 0), "Unknown direction"),
    ]
    if direction in HOSTILE_DIRECTIONS[:3]:  # the UI events: Gradio checks the dropdown's choices
        calls += [
            ("/translate_stream", (DE, direction, "greedy", 4, 4),
             "not in the list of choices"),
            ("/positional", (direction, 20, "0, 1"), "not in the list of choices"),
            ("/pair_view", (DE, DE, direction), "not in the list of choices"),
        ]
    for api, args, expected in calls:
        with pytest.raises(Exception) as e:
            client.predict(*args, api_name=api)
        msg = str(e.value)
        assert expected in msg, (api, msg[:300])
        assert no_traceback(msg), (api, msg[:300])
        if expected == "Unknown direction":  # the app's own message quotes at most 60 characters of it
            assert len(msg) < 400, msg[:300]
    touched = [(ev, p) for ev, p in no_loading
               if str(root) in p or "passwd" in p or p.startswith("/etc") or ".." in p or "ssh" in p or "win.ini" in p]
    assert touched == [], touched
    assert sorted(demo.registry.models) == names  # nothing was added or replaced


def test_empty_direction_means_the_default_direction(server, client, no_loading):
    """'' and None are the default of /translate: de-en where it is offered, else the first discovered model,
    never a path."""
    from ui.present import default_direction
    reg = server[0].registry
    expected = "de-en" if "de-en" in reg.names else reg.names[0]
    assert default_direction(reg) == expected
    for value in ("", None):
        assert client.predict(DE, value, 1, 4, api_name="/translate")["model"] == expected
    out = client.predict(DE, None, "greedy", 4, 4, api_name="/translate_stream")
    assert "Pick a translation direction" in out[1]


@pytest.mark.parametrize("args,expected", [
    ((DE, {"a": 1}, 1, 4), "Unknown direction"),
    ((DE, ["de-en"], 1, 4), "Unknown direction"),
    ((DE, "de-en", "abc", 4), "beam must be a whole number"),
    ((DE, "de-en", 1, "1e999"), "max_len must be a whole number"),
    ((DE, "de-en", None, 4), "beam must be a whole number"),
])
def test_odd_argument_types_are_clear_errors(client, args, expected):
    with pytest.raises(Exception) as e:
        client.predict(*args, api_name="/translate")
    assert expected in str(e.value) and no_traceback(str(e.value))


def test_odd_compare_arguments_are_clear_errors(client, spy_translate):
    for kwargs, expected in ((dict(kind="../../etc"), "unknown attention kind"),
                             (dict(ablate_heads=["<img src=x>"]), "cannot read head"),
                             (dict(ablate_src_tokens=["/etc/passwd"]), "cannot read source position"),
                             (dict(layer="x"), "layer must be a whole number")):
        args = dict(text=DE, direction="de-en", beam=1, max_len=4, pad_to=0, src_padding_mask=True,
                    causal_mask=True, positional_encoding=True, ablate_heads=[], ablate_src_tokens=[],
                    kind="cross", layer=0, head=0)
        args.update(kwargs)
        with pytest.raises(Exception) as e:
            client.predict(*args.values(), api_name="/compare")
        assert expected in str(e.value) and no_traceback(str(e.value)), str(e.value)
    assert len(spy_translate) <= 2  # bad kinds and heads are refused before the model runs (layer after)


# --------------------------------------------------------------------------- the queue bound

def test_queue_bound_default_and_env(tmp_path, monkeypatch, server):
    assert server[0]._queue.max_size == settings.Settings().queue_size == 64
    make_checkpoint(tmp_path / "de-en", "de", "en")
    monkeypatch.setenv("ATTN_QUEUE_SIZE", "5")
    assert app.build_app(tmp_path, device="cpu", warm=False)._queue.max_size == 5


def test_past_the_queue_bound_requests_get_busy_try_again(tmp_path, monkeypatch):
    for t in threading.enumerate():  # other apps' warm-up threads must not hold the model lock while we block
        if t.name == "warm-up":
            t.join(60)
    make_checkpoint(tmp_path / "de-en", "de", "en")
    monkeypatch.setenv("ATTN_EVENT_CONCURRENCY", "1")  # one event at a time: the next ones wait in the queue
    demo, url = launch(tmp_path, warm=False, max_queue=2)
    entered, release = threading.Event(), threading.Event()
    orig = decoding.translate

    def slow(*a, **k):
        entered.set()
        assert release.wait(60)
        return orig(*a, **k)

    monkeypatch.setattr(decoding, "translate", slow)
    try:
        c = Client(url, verbose=False)
        first = c.submit(DE, "de-en", 1, 4, api_name="/translate")
        assert entered.wait(60)                        # one request runs (and blocks) ...
        waiting = [c.submit(DE, "de-en", 1, 4, api_name="/translate") for _ in range(2)]
        deadline = time.time() + 30
        while len(demo._queue) < 2 and time.time() < deadline:
            time.sleep(0.05)
        assert len(demo._queue) == 2                   # ... two wait: the queue is full

        refused = c.submit(DE, "de-en", 1, 4, api_name="/translate")
        with pytest.raises(Exception) as e:
            refused.result(timeout=30)
        assert type(e.value).__name__ == "QueueError" and "try again" in str(e.value).lower()
        assert no_traceback(str(e.value))
        with pytest.raises(Exception) as e:          # the UI's streaming event too
            c.predict(DE, "de-en", "greedy", 4, 4, api_name="/translate_stream")
        assert "try again" in str(e.value).lower()
        r = httpx.post(url + "gradio_api/call/translate", json={"data": [DE, "de-en", 1, 4, None, False]}, timeout=30)
        assert r.status_code == 503 and "Queue is full" in r.json()["detail"] and no_traceback(r.text)
        with urllib.request.urlopen(url + "gradio_api/info", timeout=30) as info:  # the server itself still answers
            assert info.status == 200
    finally:
        release.set()
    try:
        # nothing accepted is lost, and the server takes new work once the queue drains
        for job in [first, *waiting]:
            assert job.result(timeout=60)["src_tokens"][0] == "<bos>"
        monkeypatch.undo()
        assert c.predict(DE, "de-en", 1, 4, api_name="/translate")["model"] == "de-en"
    finally:
        demo.close()
