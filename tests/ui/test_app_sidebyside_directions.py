"""Analysis › Two models from each of the six shipped directions, handler by handler on the shipped checkpoints:
the second-model list holds every model that reads the run's source language (the de-en training snapshots
among them), the view says in words which ones, or that none does and where two models can be compared
instead, and a direction change leaves no pick the list no longer holds (Gradio refuses such a value with a
toast) and no comparison of the earlier run on screen."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from urllib.parse import parse_qsl, urlsplit

import gradio as gr
import pytest

from model.families import catalog
from ui.present import md_escape
from ui.present.payload import EVERYDAY
from ui.present.sidebyside import language
from ui.state import RunInputs, Selection, WhatIf, link_url

ROOT = Path(__file__).resolve().parents[2] / "checkpoints"
DIRECTIONS = ["de-en", "en-de", "en-fr", "fr-en", "en-cs", "cs-en"]
HERE = Selection(section="analysis", subview="sidebyside")
SNAPSHOT = "de-en@8060"


@pytest.fixture(scope="module")
def demo():
    import app as app_module
    d = app_module.build_app(ROOT, device="cpu", warm=False)
    yield d
    d.close()


def _fn(demo, test):
    return next(f.fn for f in demo.fns.values() if test(f))


def _translate(demo, model: str, text: str | None = None) -> dict:
    """The translate event's values by component, the view showing Two models."""
    fn = _fn(demo, lambda f: f.api_name == "translate_stream")
    return fn(text or EVERYDAY[model.split("-")[0]][0], model, "greedy", 4, 20, HERE)


def _readers(demo, model: str) -> list[str]:
    """Every offered model other than ``model`` that reads its source language, worked out from the catalog."""
    src = language(model.split("-")[0])
    return sorted(k for k, i in catalog.infos(demo.registry).items() if k != model and language(i.src_lang) == src)


def _shown(before, update) -> tuple:
    """(value, offered keys) of the dropdown after ``update``, the value read back as Gradio reads it on the
    next event: one the update does not name stays, and one the choices do not hold raises the error a visitor
    sees as a toast."""
    passed = update._constructor_args[0]  # what the handler named (Gradio sends only that)
    value = passed["value"] if "value" in passed else before
    choices = passed.get("choices", [])
    return gr.Dropdown(choices=choices, value=None).preprocess(value), [k for _, k in choices]


@pytest.mark.parametrize("model", DIRECTIONS)
def test_each_direction_offers_every_reader_or_says_there_is_none(demo, model):
    parts = demo.shell.analysis.sbs
    values = _translate(demo, model)
    offered = [k for _, k in values[parts.second].choices]
    assert sorted(offered) == _readers(demo, model)
    md = values[parts.md]
    src = language(model.split("-")[0])
    if offered:
        assert f"on this server read{'s' if len(offered) == 1 else ''} {src}" in md and "Pick one" in md
    else:
        assert md.startswith(f"No other model on this server reads {src}")
        # a link to where two models can be compared: the reverse direction on this run's own translation
        rev = "-".join(reversed(model.split("-")))
        links = [dict(parse_qsl(urlsplit(u.split(")")[0]).query)) for u in md.split("](")[1:]]
        assert {"model": rev, "text": values[demo.shell.run_state].tr.text} in \
            [{k: q[k] for k in ("model", "text")} for q in links]
        assert all(q.get("section") == "analysis" and q.get("subview") == "sidebyside" for q in links), links
    if model == "de-en":
        assert SNAPSHOT in offered and "training snapshots of this run's model" in md
    assert "| model |" not in md  # no comparison before a second model is picked


def test_a_direction_change_leaves_no_stale_pick_or_comparison(demo):
    parts = demo.shell.analysis.sbs
    load = _fn(demo, lambda f: f.api_name == "deep_link")
    query = dict(parse_qsl(urlsplit(link_url("http://h/", RunInputs(model="de-en", text=EVERYDAY["de"][0],
                                                                    max_len=20), HERE, WhatIf(second=SNAPSHOT))).query))
    german = load(1440, SimpleNamespace(query_params=query, headers={}))
    assert german[parts.second].value == SNAPSHOT and "| model |" in german[parts.md]
    held = german[parts.held]
    czech = _translate(demo, "cs-en")
    value, offered = _shown(SNAPSHOT, czech[parts.second])  # raised "not in the list of choices" before
    assert value is None and offered == []
    assert "| model |" not in czech[parts.md] and czech[parts.md].startswith("No other model on this server reads")
    assert czech[parts.trust_a] == czech[parts.trust_b] == ""
    for plot in (parts.grid_a, parts.grid_b):  # the grids say why, no earlier run's heads
        assert not [t for t in czech[plot].data if t.type == "heatmap"]
    keep = _fn(demo, lambda f: parts.held in f.inputs and parts.second in f.outputs)
    # the step after the run picks the earlier second model again only where it reads the new run's language
    assert keep(czech[demo.shell.run_state], HERE, held, "analysis", {"analysis": "sidebyside"}) == \
        [gr.skip()] * (2 + len(parts.outputs()))
    # back to German: the snapshot is offered again, picked again and drawn at once where the view shows
    again = _translate(demo, "de-en")
    run = again[demo.shell.run_state]
    assert SNAPSHOT in [k for _, k in again[parts.second].choices] and again[parts.second].value is None
    after = dict(zip([parts.second, "stamp", *parts.outputs()],
                     keep(run, HERE, held, "analysis", {"analysis": "sidebyside"})))
    assert after[parts.second].value == SNAPSHOT and after["stamp"][0] == run.id
    assert after[parts.held].run_id == run.id and after[parts.held].name == SNAPSHOT
    assert f"| model | {md_escape('de-en')} | {md_escape(SNAPSHOT)} |" in after[parts.md]
    assert md_escape(run.tr.text) in after[parts.md]
    # elsewhere, the pick is set and the view drawn when it is opened
    hidden = keep(run, HERE, held, "translate", {})
    assert hidden[0].value == SNAPSHOT and hidden[1] is None
