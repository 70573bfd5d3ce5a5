"""Analysis › Corpus: the outputs of ``python -m model.corpus`` (each analysis run on Ray over ten sentences
of a tiny checkpoint, tests/corpus_fixtures.py) read into the corpus views. The figures hold the summary's
figures; the sentence a head opens on is the one where the model, run again in process, gives that head its
most notable value; only folders under the corpus root open, and every bad folder is a sentence; a link
restores the corpus and the link on screen keeps it."""
from __future__ import annotations

import json
import math
import os
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from model.analysis.alignment.heads import rank_heads
from model.analysis.alignment.reference import parse_pharaoh
from model.analysis.readouts import average_head_profiles
from model.analysis.trust_signals import NUMERIC
from model.engine.names import HeadRef
from model.engine.transformer import CROSS
from model.families import load_checkpoint
from tests.corpus_fixtures import corpus_lines, make_corpus_outputs
from tests.ui.test_whatif_links import _query
from ui.present import corpus as cp
from ui.state import ModelShape, RunInputs, Selection, WhatIf, from_query, link_url, whatif_from_query

TOL = 1e-9   # the figures are the summary's numbers, only rounded where a table shows them
RUN_TOL = 1e-5  # the model run again in process: float32 sums in another order than the replica's


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    base = tmp_path_factory.mktemp("corpus-views")
    ckpts, root = base / "checkpoints", base / "corpus"
    ckpts.mkdir()
    root.mkdir()
    from tests.app_fixtures import make_checkpoint
    make_checkpoint(ckpts / "de-en", "de", "en", seed=0)
    outs = make_corpus_outputs(root, ckpts / "de-en")
    return {"root": root, "ckpts": ckpts, "outs": outs, "lm": load_checkpoint(ckpts / "de-en"),
            "open": {a: cp.open_output(p.name, root) for a, p in outs.items()}}


def test_the_profile_grid_holds_the_corpus_means(made):
    out = made["open"]["profiles"]
    assert (out.analysis, out.summary["analysed"], out.summary["skipped"]) == ("profiles", 9, 1)
    fig = cp.profiles_figure(out, "max_weight")
    assert "mean over 9 corpus sentences" in fig.layout.title.text
    cross = next(t for t in fig.data if t.meta["kind"] == CROSS)
    for h in out.summary["heads"]:
        if h["kind"] == CROSS:
            assert abs(cross.z[h["layer"]][h["head"]] - h["max_weight"]) <= TOL
    assert len(cp.head_choices(out)) == 24 and cp.head_choices(out)[0] == "enc L0 H0"


def test_a_profile_head_opens_on_its_sharpest_sentence(made):
    out, lm = made["open"]["profiles"], made["lm"]
    ref = HeadRef(CROSS, 1, 2)
    ex = cp.example_for(out, ref, "entropy")
    src = corpus_lines()["src"]
    assert ex.text == src[ex.index] and "lowest entropy" in ex.why and "among 9 sentences" in ex.why
    # the head's profile on each sentence, computed again in process: the chosen one is the most notable
    per = {i: next(r for r in average_head_profiles(lm, [s]) if (r.kind, r.layer, r.head) == tuple(ref))
           for i, s in enumerate(src) if s}
    assert abs(per[ex.index].entropy - min(r.entropy for r in per.values())) <= RUN_TOL
    high = cp.example_for(out, ref, "max_weight")
    assert abs(per[high.index].max_weight - max(r.max_weight for r in per.values())) <= RUN_TOL
    assert "highest max weight" in high.why


def test_the_alignment_ranking_and_a_heads_best_sentence(made):
    out, lm = made["open"]["alignment"], made["lm"]
    ranking = out.summary["ranking"]
    fig = cp.ranking_figure(out)
    bars = fig.data[0]
    assert list(bars.y) == [e["label"] for e in ranking[:len(bars.y)]]
    assert all(abs(x - e["aer"]) <= TOL for x, e in zip(bars.x, ranking))
    assert list(bars.x) == sorted(bars.x)  # best first
    for cell, e in zip(bars.customdata, ranking):
        assert list(cell) == ([e["layer"], e["head"]] if e["source"] == "head" else [None, None])
    table = cp.ranking_table(out)
    assert [r[1] for r in table] == [e["label"] for e in ranking] and table[0][0] == 1
    label = cp.head_choices(out)[0]
    ref = HeadRef.parse(label)
    best = next(e["best"] for e in ranking if e["label"] == label)
    ex = cp.example_for(out, ref)
    lines = corpus_lines()
    per = {}
    for i, s in enumerate(lines["src"]):
        if s:  # the head's AER on this one sentence, in the reading the corpus ranks it by
            one = rank_heads(lm, [s], [lines["ref"][i]], [parse_pharaoh(lines["align"][i])])
            e = next(x for x in one.entries if x.label == label)
            per[i] = getattr(e, best).aer
    finite = {i: a for i, a in per.items() if math.isfinite(a)}
    assert abs(finite[ex.index] - min(finite.values())) <= TOL and "lowest AER" in ex.why


def test_the_trust_table_and_the_lens_curve(made):
    trust, lens = made["open"]["trust"], made["open"]["lens"]
    rows = cp.trust_table(trust)
    assert [r[0] for r in rows] == list(NUMERIC)
    for r in rows:
        spread = trust.summary["signals"][r[0]]
        assert abs(r[1] - spread["mean"]) <= 1e-4 and abs(r[3] - spread["p50"]) <= 1e-4
        cal = next(c for c in trust.summary["calibration"] if c["signal"] == r[0])
        assert (r[5] is None) == (cal["auroc"] is None)  # NaN (one class only) shows empty, never as a number
    assert "failures" in cp.trust_markdown(trust)
    fig = cp.lens_figure(lens)
    curve = lens.summary["curve"]
    assert len(fig.data) == 3 and list(fig.data[0].x) == [p["layer"] for p in curve]
    assert np.allclose(fig.data[1].y, [100 * p["same_as_final"] for p in curve], atol=TOL)
    assert np.allclose(fig.data[2].y, [p["chrf_ref"] for p in curve], atol=TOL)
    assert fig.data[1].y[-1] == 100.0  # the last layer's output is the model's own
    for out in (trust, lens):
        assert cp.head_choices(out) == []
        with pytest.raises(cp.CorpusOpenError, match="name no heads"):
            cp.example_for(out, HeadRef(CROSS, 0, 0))


@pytest.mark.parametrize("typed, says", [
    ("", "Type the path of a corpus output folder"),
    ("/etc", "outside the folder this app opens corpus outputs from"),
    ("../", "outside the folder"),
    ("runs-profiles/../../..", "outside the folder"),
    ("nowhere", "There is no folder 'nowhere'"),
    ("plain", "has no manifest.json: it is not the output of python -m model.corpus"),
    ("broken", "manifest manifest.json cannot be read"),
    ("unfinished", "has not finished (1 shards written): run the same command again"),
    ("escape", "outside the folder"),
])
def test_a_bad_folder_is_a_sentence(made, typed, says):
    root = made["root"]
    (root / "plain").mkdir(exist_ok=True)
    (root / "broken").mkdir(exist_ok=True)
    (root / "broken" / "manifest.json").write_text("{not json", encoding="utf-8")
    (root / "unfinished").mkdir(exist_ok=True)
    (root / "unfinished" / "manifest.json").write_text(json.dumps(
        {"identity": {"analysis": "lens"}, "shards": {"0": {}}, "finished": False}), encoding="utf-8")
    if not (root / "escape").exists():
        os.symlink(made["ckpts"], root / "escape")  # a link inside the root to a folder outside it
    with pytest.raises(cp.CorpusOpenError) as e:
        cp.open_output(typed, root)
    assert says in str(e.value) and "Traceback" not in str(e.value)


def test_the_runs_model_is_found_among_the_served_ones(made):
    out = made["open"]["profiles"]
    info = SimpleNamespace(source=str(made["ckpts"] / "de-en"))
    assert cp.served_model(out, {"de-en": info}) == "de-en"
    assert cp.served_model(out, {"other": SimpleNamespace(source="/elsewhere/x")}) is None


def test_the_corpus_round_trips_through_a_link():
    inputs, sel = RunInputs(model="de-en", text="Zwei Hunde."), Selection(section="analysis", subview="corpus")
    url = link_url("http://h/", inputs, sel, WhatIf(corpus="runs/de-en profiles"))
    r = from_query(_query(url), {"de-en": ModelShape(2, 2, 4)})
    assert r.problems == [] and r.sel == sel
    assert whatif_from_query(_query(url)) == (WhatIf(corpus="runs/de-en profiles"), [])


@pytest.fixture(scope="module")
def demo(made):
    from tests.app_fixtures import launch
    mp = pytest.MonkeyPatch()
    mp.setenv("ATTN_CORPUS_ROOT", str(made["root"]))
    app, _ = launch(made["ckpts"], warm=False)
    yield app
    app.close()
    mp.undo()


def _load(demo, query: dict) -> dict:
    load = next(f for f in demo.fns.values() if f.api_name == "deep_link").fn
    values = load(1440, SimpleNamespace(query_params=query, headers={}))
    return {getattr(c, "elem_id", None) or type(v).__name__: v for c, v in values.items()}


LINK = {"text": "Zwei Hunde spielen im Schnee.", "model": "de-en", "section": "analysis", "subview": "corpus"}


def test_the_page_load_may_set_everything_the_corpus_restorer_sets(demo):
    _, outputs = demo.shell.translate.load_event
    assert set(demo.shell.restorers["corpus"].outputs) <= set(outputs)


def test_a_link_restores_the_corpus_and_the_link_keeps_it(demo, made):
    v = _load(demo, LINK | {"corpus": "runs-alignment"})
    assert "alignment heads" in v["corpus-md"] and "9 analysed, 1 skipped" in v["corpus-md"]
    assert list(v["corpus-plot"].data[0].y)[0] == made["open"]["alignment"].summary["ranking"][0]["label"]
    assert v["corpus-dir"] == "runs-alignment" and v["link-notice"] == ""
    assert _query(v["link-box"])["corpus"] == "runs-alignment"
    # elsewhere on the page the folder is kept in its box and in the link, to come back to
    v = _load(demo, {"text": "Zwei Hunde.", "model": "de-en", "corpus": "runs-lens"})
    assert v["corpus-dir"] == "runs-lens" and _query(v["link-box"])["corpus"] == "runs-lens"


def test_a_link_to_a_bad_folder_says_so_in_the_view(demo):
    v = _load(demo, LINK | {"corpus": "/etc"})
    assert "⚠️" in v["corpus-md"] and "outside the folder" in v["corpus-md"]
    assert "corpus" not in _query(v.get("link-box") or "http://h/?")


def test_a_head_opens_on_its_sentence_in_attention(demo, made):
    from ui.sections import corpus as section
    shell = demo.shell
    got = {getattr(c, "elem_id", None) or c: x for c, x in
           section.open_head(shell, f"{CROSS}|1|2", "runs-profiles", "entropy", {}).items()}
    ex = cp.example_for(made["open"]["profiles"], HeadRef(CROSS, 1, 2), "entropy")
    assert got["input-text"] == ex.text and got["direction"] == "de-en"
    assert (got["attn-kind"], got["attn-layer"].value, got["attn-head"], got["attn-view"]) == (CROSS, 1, 2, "head")
    assert got["sections"].selected == "attention" and "Opened **cross L1 H2**" in got["corpus-example"]
    bad = section.open_head(shell, f"{CROSS}|1|2", "runs-trust", "entropy", {})
    assert list(bad) == [shell.corpus.example] and "name no heads" in bad[shell.corpus.example]
