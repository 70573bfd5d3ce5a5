"""Links and exports of the "what if" runs: the clean/corrupted bench (Analysis → Two sentences) and
Attribution's foil round-trip through a link, bad values are named, a link re-runs the bench and the
attribution on load (the same map as the bench itself), the link on screen names them, and the export
records them."""
from __future__ import annotations

import json
from types import SimpleNamespace
from urllib.parse import parse_qsl, urlsplit

import pytest

from tests.app_fixtures import launch, make_checkpoint
from tests.ui.test_preset_back import handler
from ui.state import (ModelShape, PatchLink, RunInputs, Selection, WhatIf, from_query, link_url, whatif_from_query,
                      whatif_query)

DE = "Zwei Hunde spielen im Schnee."
A, B = "Ein Mann liest ein Buch.", "Ein Buch liest ein Mann."
CROSS = "decoder.cross_attn"
SHAPES = {"de-en": ModelShape(2, 2, 4)}
BENCH = PatchLink(A, B, site="z", kind=CROSS, layer=1, head=2, positions="1, 3-4", scan="heads", step=2,
                  output="a man reads", foil="book", ablation="zero")


def _query(url: str) -> dict:
    return dict(parse_qsl(urlsplit(url).query, keep_blank_values=True))


@pytest.mark.parametrize("w", [
    WhatIf(BENCH),
    WhatIf(PatchLink(A, B)),                                     # every default: only the two sentences written
    WhatIf(PatchLink(A, B, site="resid", part="encoder", point="mid", scan="positions", ablation="mean")),
    WhatIf(PatchLink(A, B, site="cross_kv", kind="decoder.self_attn", scan="none")),
    WhatIf(attr_pos=3, foil="▁vieux"),
    WhatIf(BENCH, 0, "dogs"),
])
def test_the_bench_and_the_foil_round_trip_through_a_link(w):
    inputs, sel = RunInputs(model="de-en", text=DE), Selection(section="analysis", subview="pair")
    url = link_url("http://h/", inputs, sel, w)
    r = from_query(_query(url), SHAPES)
    assert r.problems == [] and (r.inputs, r.sel) == (inputs, sel)  # the new keys are known, not "unknown"
    back, problems = whatif_from_query(_query(url), SHAPES["de-en"])
    assert problems == [] and back == w


def test_nothing_set_adds_nothing_to_the_link():
    inputs, sel = RunInputs(model="de-en", text=DE), Selection()
    assert link_url("http://h/", inputs, sel, WhatIf()) == link_url("http://h/", inputs, sel)
    assert whatif_query(WhatIf()) == {} and whatif_from_query({"text": DE}, SHAPES["de-en"]) == (WhatIf(), [])
    assert set(whatif_query(WhatIf(PatchLink(A, B)))) == {"pa", "pb"}


def test_malformed_values_are_named_and_the_defaults_kept():
    base = {"text": DE, "pa": A, "pb": B}
    cases = {"psite": ("nowhere", "psite"), "pkind": ("sideways", "pkind"), "player": ("7", "outside"),
             "phead": ("x", "whole number"), "ppos": ("1;DROP", "positions"), "pscan": ("all", "pscan"),
             "pwith": ("half", "pwith"), "apos": ("-3", "outside"), "ppoint": ("mid_cross_x", "ppoint")}
    for key, (value, said) in cases.items():
        w, problems = whatif_from_query(base | {key: value}, SHAPES["de-en"])
        assert len(problems) == 1 and said in problems[0], (key, problems)
        assert w.patch == PatchLink(A, B) and w.attr_pos is None  # the rest of the bench stays
    w, problems = whatif_from_query({"text": DE, "pa": A, "pscan": "heads"}, SHAPES["de-en"])
    assert w.patch is None and "both sentences" in problems[0]
    w, problems = whatif_from_query({"text": DE, "pa": A, "pb": "x" * 5000}, SHAPES["de-en"])
    assert w.patch is None and problems


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    root = tmp_path_factory.mktemp("checkpoints")
    make_checkpoint(root / "de-en", "de", "en", seed=0)
    app, _ = launch(root, warm=False)
    yield app
    app.close()


def _load(demo, url: str) -> dict:
    load = next(f for f in demo.fns.values() if f.api_name == "deep_link").fn
    values = load(1440, SimpleNamespace(query_params=_query(url), headers={}))
    return {getattr(c, "elem_id", None) or type(v).__name__: v for c, v in values.items()}


def _run(demo):
    return handler(demo, "translate_stream")(DE, "de-en", "greedy", 4, 20, Selection.of(CROSS))["Run"]


def _bench_controls(b: PatchLink) -> tuple:
    return (b.site, b.scan, b.part, b.point, b.positions, b.step, b.foil, b.ablation, b.output)


def _bench_handler(demo):
    """The bench button's own handler, as (run, model, A, B, bench) -> (summary, figure, steps, PatchLink): the
    bench's kind, layer and head are the selection's, which the handler reads first (one value)."""
    fn = next(f.fn for f in demo.fns.values() if [getattr(c, "elem_id", None) for c in f.outputs]
              == ["patch-md", "patch-plot", "patch-step", None, None])

    def call(run, model, a, b, bench: PatchLink):
        sel = Selection.of(bench.kind, bench.layer, bench.head, section="analysis", subview="pair")
        return fn(sel, run, model, a, b, *_bench_controls(bench))[:4]
    return call


def test_a_link_re_runs_the_bench_and_shows_the_same_map(demo):
    bench = PatchLink(A, B, kind=CROSS, scan="heads", step=1)
    url = link_url("http://h/", RunInputs(model="de-en", text=DE), Selection(section="analysis", subview="pair"),
                   WhatIf(bench))
    values = _load(demo, url)
    assert values["pair-a"] == A and values["pair-b"] == B and values["PatchLink"] == bench
    assert "A (clean)" in values["patch-md"] and "largest effect" in values["patch-md"]
    assert whatif_from_query(_query(values["link-box"]), SHAPES["de-en"]) == (WhatIf(bench), [])  # the link box too
    fig = values["patch-plot"]
    assert fig.data[0].type == "heatmap" and len(fig.data[0].z) == 2 and len(fig.data[0].z[0]) == 4
    # the bench's own button, with the same controls, draws the same map
    md, direct, _, shown = _bench_handler(demo)(values["Run"], "de-en", A, B, bench)
    assert md == values["patch-md"] and shown == bench
    assert [list(r) for r in direct.data[0].z] == [list(r) for r in fig.data[0].z]
    # a bench the model refuses (encoder positions, sources of different lengths) says why, no traceback
    bad = PatchLink("Ein Mann liest.", B, site="resid", part="encoder", scan="positions")
    values = _load(demo, link_url("http://h/", RunInputs(model="de-en", text=DE), Selection(), WhatIf(bad)))
    assert values["patch-md"].startswith("⚠️") and "equal source" in values["patch-md"]
    assert values["patch-part"]["value"] == "encoder" and values["patch-part"]["visible"] is True


def _foil_for(demo, run, pos: int) -> str:
    vocab = demo.registry.models["de-en"].tgt_vocab
    return next(t for t in ("dogs", "snow", "woman", "park") if t != run.tr.output_tokens[pos] and t in vocab.stoi)


def test_a_link_restores_the_foil_and_names_a_bad_one(demo):
    run = _run(demo)
    pos = 1
    foil = _foil_for(demo, run, pos)
    url = link_url("http://h/", run.inputs, Selection(section="computation", subview="attribution"),
                   WhatIf(attr_pos=pos, foil=foil))
    values = _load(demo, url)
    held = values["HeldAttribution"]
    c = held.attr
    assert held.run_id == values["Run"].id and c.attribution.position == pos and c.foil.piece == foil
    assert values["attr-foil-text"] == foil and values["attr-pos"].value == pos
    assert f"rather than the foil **{foil}**" in values["attr-md"]
    assert whatif_from_query(_query(values["link-box"]), SHAPES["de-en"])[0] == WhatIf(attr_pos=pos, foil=foil)
    # a foil the target vocabulary cannot take: named in the notice, the attribution shown without it
    values = _load(demo, url.replace(f"foil={foil}", "foil=zzqx"))
    assert "foil='zzqx'" in values["link-notice"] and values["HeldAttribution"].foil is None
    assert "zzqx" not in values["notice"]  # said once, above the sections, not again in the run's notices
    assert not any("link's" in n for n in values["Run"].notices)  # which Masks' comparison would repeat
    assert values["attr-foil-text"] == ""
    values = _load(demo, url.replace(f"apos={pos}", "apos=999"))
    assert "past this run's last output token" in values["link-notice"]


def test_the_link_on_screen_and_the_export_carry_the_bench_and_the_foil(demo):
    first = _run(demo)
    foil = _foil_for(demo, first, 0)
    values = _load(demo, link_url("http://h/", first.inputs, Selection(section="computation", subview="attribution"),
                                  WhatIf(attr_pos=0, foil=foil)))
    run, held = values["Run"], values["HeldAttribution"]
    bench = PatchLink(A, B, scan="none", layer=1, head=3, positions="2", ablation="zero", output="a man")
    link = next(f for f in demo.fns.values() if f.api_name == "make_link").fn
    toggles = (0, True, True, True, [], [])
    on = {s: Selection(section=s.split("/")[0], subview=s.split("/")[-1]) for s in ("analysis/pair",
                                                                                  "computation/attribution")}
    def at(sel, r=run):  # the link button's inputs: no second model, no DecoderLens layer, the page's address last
        return link(r, bench, held, *toggles, sel, None, None, None, "http://h/")  # no second model, lens, corpus
    on_pair = at(on["analysis/pair"])
    assert whatif_from_query(_query(on_pair), SHAPES["de-en"]) == (WhatIf(bench), [])
    on_attr = at(on["computation/attribution"])
    assert whatif_from_query(_query(on_attr), SHAPES["de-en"]) == (WhatIf(attr_pos=0, foil=foil), [])
    assert not set(_query(at(Selection(section="translate")))) & {"pa", "foil"}
    # an attribution of another run is not this screen's
    assert "foil" not in _query(at(on["computation/attribution"], first))

    export = next(f for f in demo.fns.values() if f.api_name == "export_run").fn
    _, js = export(run, "greedy", 4, 20, bench, held)
    settings = json.load(open(js, encoding="utf-8"))["settings"]
    assert settings["patch_bench"] == {**vars(bench), "model": "de-en"}
    a = settings["attribution"]
    assert a["position"] == 0 and a["foil"] == foil and a["foil_token"] == foil
    assert (a["p_token"], a["p_foil"], a["target"]) == (held.attr.p_token, held.attr.p_foil, held.attr.target)
    _, js = export(run, "greedy", 4, 20, None, None)
    settings = json.load(open(js, encoding="utf-8"))["settings"]
    assert "patch_bench" not in settings and "attribution" not in settings


def test_the_step_choices_follow_b_and_the_target_text(demo):
    """Before the bench runs, the step dropdown lists the tokens it will force: the target text's, else B's
    translation's, <eos> last; the bench then measures exactly those steps."""
    steps = next(f.fn for f in demo.fns.values()
                 if [getattr(c, "elem_id", None) for c in f.outputs] == ["patch-step"] and len(f.inputs) == 6)
    bench = _bench_handler(demo)
    run = _run(demo)
    for text_b, output in ((B, ""), (B, "a man reads a book"), ("Ein Mann.", "dogs are")):
        d = steps(run, "de-en", A, text_b, output, 1)
        _, _, after, _ = bench(run, "de-en", A, text_b, PatchLink(A, text_b, scan="none", output=output))
        assert d.choices == after.choices and d.value == 1  # the bench forces the tokens listed
    assert [label for label, _ in steps(run, "de-en", A, B, "dogs are", 9).choices] == \
        ["step 0: dogs", "step 1: are", "step 2: <eos>"]
    assert steps(run, "de-en", A, B, "dogs are", 9).value == 2  # a step past the target: its last
    assert isinstance(steps(run, "de-en", A, "  ", "", 0), dict)  # nothing to read: left as it is (a skip)


def test_the_target_step_starts_where_a_and_b_differ(demo):
    """A step left at 0 moves to the first step where A's translation and the target both runs are forced on
    differ (at a step where they agree a patch has nothing to restore); a step the user chose stays."""
    from model.engine.decoding import DecodeOptions, translate
    steps = next(f.fn for f in demo.fns.values()
                 if [getattr(c, "elem_id", None) for c in f.outputs] == ["patch-step"] and len(f.inputs) == 6)
    lm, run = demo.registry.models["de-en"], _run(demo)
    a = lm.tgt_vocab.decode(translate(lm, A, DecodeOptions(replace_unk=False, record=False, trace=False)).output_ids)
    assert len(a) > 3 and "<unk>" not in a[:2]
    other = next(w for w in ("dogs", "snow", "woman", "park") if w != a[2])
    target = " ".join([*a[:2], other, "."])   # A's first two tokens, then another word
    assert steps(run, "de-en", A, B, target, 0).value == 2
    assert steps(run, "de-en", A, B, target, 1).value == 1
