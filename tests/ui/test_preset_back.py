"""The run-level wiring that needs no model call: Back after the word-order preset, the thumbnails'
outline of the selected head, and the hint when Direction changes (the launched app, gradio_client)."""
from __future__ import annotations

import json

import pytest

from tests.app_fixtures import launch, make_checkpoint, named, select, shown
from ui.present.payload import word_order_demo
from ui.state import Selection

DE = "Ein Mann fährt mit dem Fahrrad durch die Stadt."
CROSS, ENC = "decoder.cross_attn", "encoder.self_attn"
OUTLINE = "#d62728"  # the selected panel's outline (grey for the others)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("checkpoints")
    make_checkpoint(root / "de-en", "de", "en", seed=0)
    make_checkpoint(root / "en-de", "en", "de", seed=1)
    demo, url = launch(root)
    yield demo, url, root
    demo.close()


def outputs(client, out, api_name: str) -> dict:
    """A predict() result keyed by the outputs' elem_ids (gradio_client returns no State nor Button)."""
    import urllib.request
    with urllib.request.urlopen(client.src.rstrip("/") + "/config", timeout=30) as r:
        cfg = json.load(r)
    comps = {c["id"]: c for c in cfg["components"]}
    dep = next(d for d in cfg["dependencies"] if d.get("api_name") == api_name)
    names = [comps[i].get("props", {}).get("elem_id") or comps[i]["type"] for i in dep["outputs"]
             if comps[i]["type"] not in ("state", "button")]
    out = out if isinstance(out, (list, tuple)) else [out]
    assert len(out) == len(names), (len(out), names)
    return dict(zip([n.replace("-", "_") for n in names], out))


def handler(demo, api_name: str):
    """The event's own function, called in-process: its values keyed by the outputs' elem_ids (the
    States, which have none, by their value's type name)."""
    fn = next(f for f in demo.fns.values() if f.api_name == api_name)

    def call(*args):
        values = fn.fn(*args)
        return {getattr(c, "elem_id", None) or type(v).__name__: v for c, v in values.items()}
    return call


def translate(client, text, kind=CROSS, layer=0, head=0, direction="de-en") -> dict:
    select(client, kind, layer, head)
    out = client.predict(text, direction, "greedy", 4, 30, api_name="/translate_stream")
    return named(client, client.src, out)


def preset(client, text, kind=CROSS, layer=0, head=0) -> dict:
    select(client, kind, layer, head)
    out = client.predict(text, "de-en", True, True, True, api_name="/word_order_preset")
    return outputs(client, out, "word_order_preset")


def back(client) -> dict:
    """Back: its selection is the session's Selection state (the kind, layer and head it restores are the
    replaced run's own)."""
    out = client.predict(api_name="/preset_back")
    return outputs(client, out, "preset_back")


def figure(value) -> dict:
    assert isinstance(value, dict) and value["type"] == "plotly", value
    return json.loads(value["plot"])


def outlined(fig: dict, n_heads: int = 4) -> list[tuple[int, int]]:
    """The (layer, head) of every panel drawn with the selection's outline (panels in layer-major order)."""
    return [divmod(i, n_heads) for i, s in enumerate(fig["layout"]["shapes"]) if s["line"]["color"] == OUTLINE]


def source_ticks(fig: dict) -> list[str]:
    return fig["layout"]["xaxis"]["ticktext"]


def test_back_restores_the_run_the_preset_replaced(client):
    demo = word_order_demo("de-en", "de")
    mine = translate(client, DE, layer=1, head=2)
    p = preset(client, DE, CROSS, 1, 2)
    assert p["input_text"] == demo.text and p["tog_positional"] is False
    # the demo's encoder self-attention head (the tiny model has 2 layers and 4 heads: the demo's own fits)
    assert p["attn_kind"] == ENC and (shown(p["attn_layer"])["value"], shown(p["attn_head"])["value"]) == (demo.layer, demo.head)
    theirs = translate(client, demo.text, ENC, demo.layer, demo.head)  # the preset's next step
    assert theirs["translation"] != mine["translation"] or theirs["src_chips"] != mine["src_chips"]

    b = back(client)
    assert b["input_text"] == DE and b["direction"] == "de-en" and b["tog_positional"] is True
    assert b["translation"] == mine["translation"] and b["src_chips"] == mine["src_chips"]
    assert b["run_status"].startswith("✓ back")
    # the map the user had: cross-attention, layer 1, head 2, drawn again without a model call
    assert b["attn_kind"] == CROSS and shown(b["attn_head"])["value"] == 2 and shown(b["attn_layer"])["value"] == 1
    assert outlined(figure(b["watch_heads"])) == [(1, 2)]
    # the session's current run is the user's again: a view drawn from it now shows DE's tokens
    select(client, CROSS, 0, 0)
    thumbs = figure(client.predict(api_name="/thumbnails"))
    assert "Mann" in source_ticks(thumbs) and "Frau" not in source_ticks(thumbs)
    # nothing left to go back to
    again = back(client)
    assert all(v in (None, {"__type__": "update"}) for v in again.values()), again  # every view left as it is


def test_a_second_press_of_the_preset_keeps_the_first_way_back(client):
    demo = word_order_demo("de-en", "de")
    mine = translate(client, DE)
    preset(client, DE)
    translate(client, demo.text, ENC, demo.layer, demo.head)
    preset(client, demo.text, ENC, demo.layer, demo.head)  # pressed again on the preset's own run
    translate(client, demo.text, ENC, demo.layer, demo.head)
    b = back(client)
    assert b["input_text"] == DE and b["translation"] == mine["translation"] and b["attn_kind"] == CROSS


def test_back_shows_only_with_a_run_to_go_back_to_and_restores_that_very_run(server, monkeypatch):
    """The handlers called in-process: the Button's visibility and the State do not reach a client."""
    from ui.sections.interventions import PresetBack
    from ui.state import Run, Selection
    demo = server[0]
    tr = next(f for f in demo.fns.values() if f.api_name == "translate_stream").fn
    run = next(v for v in tr(DE, "de-en", "greedy", 4, 30, Selection.of(CROSS, 1, 2)).values()
               if isinstance(v, Run))
    preset_fn, back_fn = handler(demo, "word_order_preset"), handler(demo, "preset_back")
    none = preset_fn(None, "", "de-en", Selection.of(CROSS), True, True, True, None)
    assert none["cmp-back"].visible is False and "PresetBack" not in none  # no run: nothing to go back to
    p = preset_fn(run, "my edit", "de-en", Selection.of(CROSS, 1, 2), True, False, True, None)
    saved = p["PresetBack"]
    assert p["cmp-back"].visible is True and isinstance(saved, PresetBack)
    assert (saved.run, saved.text, saved.kind, saved.layer, saved.head, saved.causal) == (run, "my edit", CROSS, 1, 2,
                                                                                           False)
    from ui import calls

    def no_model(*a, **k):
        raise AssertionError("Back called the model")
    monkeypatch.setattr(calls, "gpu_translate", no_model)
    monkeypatch.setattr(calls, "gpu_compare", no_model)
    b = back_fn(saved, None, Selection.of(ENC, 1, 1, section="interventions"))
    assert b["Run"] is run  # the very Run the preset replaced is current again
    assert b["cmp-back"].visible is False and b["input-text"] == "my edit" and b["tog-causal"] is False
    assert b["cmp-base"].value and "Baseline (the current run)" in b["cmp-base"].label  # its section redrawn
    assert set(back_fn(None, None, Selection())) == {
        "cmp-back", "NoneType"}  # pressed with nothing kept: only hides itself (and keeps nothing)


def test_the_presets_run_is_recorded_in_the_run_history(server):
    """The preset's run (after the selection it set is built) is followed by the run history's record, as
    every run is."""
    from ui.sections import Shell
    fns = list(server[0].fns.values())
    preset = next(f for f in fns if f.api_name == "word_order_preset")
    built = next(f for f in fns if f.trigger_after == preset._id)
    assert built.fn is Shell.selection
    run_step = next(f for f in fns if f.trigger_after == built._id)
    assert "_record" in {getattr(f.fn, "__name__", "") for f in fns if f.trigger_after == run_step._id}


def test_thumbnails_outline_follows_the_selected_cross_attention_head(client):
    r = translate(client, DE, CROSS, 1, 3)
    assert outlined(figure(r["watch_heads"])) == [(1, 3)]  # a new run is drawn with the selection's head
    for layer, head in ((0, 0), (1, 2), (0, 3)):
        select(client, CROSS, layer, head)
        assert outlined(figure(client.predict(api_name="/thumbnails"))) == [(layer, head)]
    # the thumbnails show cross-attention only: another kind's head is not outlined on them
    select(client, ENC, 1, 2)
    assert outlined(figure(client.predict(api_name="/thumbnails"))) == []
    assert outlined(figure(translate(client, DE, ENC, 1, 2)["watch_heads"])) == []


def test_direction_hint_says_the_views_still_show_the_last_run(client):
    translate(client, DE)
    hint = client.predict("en-de", api_name="/direction_hint")
    assert "press **Translate**" in hint and "English → German" in hint and "German → English run" in hint
    assert "press" not in (client.predict("de-en", api_name="/direction_hint") or "")  # back on the run's own


def test_back_hides_once_another_run_replaces_the_presets(server, client):
    """Back leads to the run the preset replaced only while the preset's run is current: a later run of
    another sentence hides the button and drops what it kept; the preset's own run keeps both."""
    demo_app = server[0]
    tr = next(f for f in demo_app.fns.values() if f.api_name == "translate_stream").fn
    demo = word_order_demo("de-en", "de")

    def values(text):
        out = tr(text, "de-en", "greedy", 4, 30, Selection.of(ENC, demo.layer, demo.head))
        return {getattr(c, "elem_id", None) or type(c).__name__: v for c, v in out.items()}

    assert values(demo.text)["cmp-back"] == {"__type__": "update"}  # the preset's chained translate: Back stays
    assert values(DE)["cmp-back"].visible is False  # another sentence: hidden (and, below, nothing kept)
    # through the app: preset, its run, then another sentence; Back has nothing left to restore
    translate(client, DE)
    preset(client, DE)
    translate(client, demo.text, ENC, demo.layer, demo.head)
    translate(client, "Eine Frau liest ein Buch im Park.")
    b = back(client)
    assert all(v in (None, {"__type__": "update"}) for v in b.values()), b
