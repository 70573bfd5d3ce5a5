"""The Computation section and the /attribution API through gradio_client, on tiny random checkpoints:
inside one head (every kind), the residual stream, the logit lens, attribution, forced decoding (which
becomes the current run), the embedding steps, and the export of every hook point."""
from __future__ import annotations

import json

import numpy as np
import pytest
from gradio_client import Client

from model.analysis.attribution import METHODS

from tests.app_fixtures import named, select, selected, served, shown

SRC = "Zwei Hunde spielen im Schnee."
REF = "Two dogs are playing in the snow."


@pytest.fixture(scope="module")
def url(tmp_path_factory):
    with served(tmp_path_factory, warm=False) as url:
        yield url


@pytest.fixture()
def client(url):
    """A fresh session with SRC translated."""
    c = Client(url, verbose=False)
    c.predict(SRC, "de-en", "greedy", 4, 30, api_name="/translate_stream")
    return c


def plot(value) -> dict:
    assert isinstance(value, dict) and value["type"] == "plotly", value
    return json.loads(value["plot"])


def decode(z):
    """A plotly array as sent (typed-array dict or nested lists) as numpy."""
    if isinstance(z, dict):
        a = np.frombuffer(__import__("base64").b64decode(z["bdata"]), dtype=z["dtype"])
        return a.reshape([int(s) for s in str(z.get("shape", len(a))).split(",")])
    return np.asarray(z, dtype=float)


SUBVIEWS = (("open_computation", (32, "0, 1", "encoder", 1)), ("inside_view", ()), ("residual_view", None),
            ("lens_view", ()), ("forced_result_view", ()))


def open_section(c, kind="decoder.cross_attn", layer=1, head=2, query=1, part="decoder") -> dict:
    """Each sub-view of the section opened in turn (its tab's event, by name), keyed by the outputs' elem_ids;
    Inside one head opened last, so that the section shows it (as after a click on its tab)."""
    select(c, kind, layer, head, query=query)
    opened = {}
    for api, args in (*SUBVIEWS[2:], SUBVIEWS[0], SUBVIEWS[1]):
        out = c.predict(*(args if args is not None else (part,)), api_name=f"/{api}")
        opened |= named(c, c.src, out if isinstance(out, tuple) else (out,), api)
    return opened


def test_opening_each_sub_view_draws_it_for_the_current_run(client):
    o = open_section(client)
    assert [q[1] for q in o["head_query"]["choices"]][:2] == [0, 1]
    assert o["head_query"]["choices"][0][0].startswith("0: <bos>→")  # decoder queries read input→token
    assert "cross-attention, layer 1, head 2" in plot(o["head_comp"])["layout"]["title"]["text"]
    assert plot(o["pe_norms"])["data"] and plot(o["pe_heat"])["data"]
    assert plot(o["resid_plot"])["data"] and plot(o["normw_plot"])["data"] and plot(o["lens_plot"])["data"]
    assert "attr_pos" not in o  # a model call: drawn only when its own tab opens
    assert o["ref_example"]["choices"]  # test-set sentences with their references (or the built-in ones)


def test_a_query_title_shows_bos_once_escaped(client):
    """Plot titles are plain text escaped once for Plotly: no Markdown backslashes, no double entities."""
    title = plot(open_section(client, query=0)["head_comp"])["layout"]["title"]["text"]
    assert "query 0: &lt;bos&gt;→" in title and "&amp;" not in title and "\\" not in title


def test_a_head_title_says_which_layer_and_head_is_first(client):
    """Titles count from 0 as the selection bar does, and say so the same way: "layer 0 (first)"."""
    open_section(client)
    for layer, head, name in ((0, 0, "layer 0 (first), head 0 (first)"), (1, 0, "layer 1, head 0 (first)"),
                              (1, 2, "layer 1, head 2")):
        select(client, "decoder.cross_attn", layer, head, query=0)
        fig = client.predict(api_name="/head_computation")[1]
        assert f"{name}, query 0" in plot(fig)["layout"]["title"]["text"]


@pytest.mark.parametrize("kind,keys", [("encoder.self_attn", "source"), ("decoder.self_attn", "decoder input"),
                                       ("decoder.cross_attn", "source")])
def test_inside_one_head_for_every_kind(client, kind, keys):
    """The softmax panel is a distribution over the keys; cross-attention's keys are the source tokens."""
    open_section(client)
    select(client, kind, 1, 2, query=2)
    query, fig = client.predict(api_name="/head_computation")
    f = plot(fig)
    assert "layer 1, head 2, query 2" in f["layout"]["title"]["text"]
    ticks = [t for ax in f["layout"].values() if isinstance(ax, dict) for t in ax.get("ticktext", [])]
    assert ("Hunde" in " ".join(ticks)) == (keys == "source")
    assert shown(query)["value"] == 2
    _, normw = client.predict("encoder", api_name="/residual_view")  # another stack: the view is stale
    assert "layer 1, head 2: α beside" in plot(normw)["layout"]["title"]["text"]


def test_inside_one_head_waits_while_another_section_shows(client):
    """A shared-selection change elsewhere draws nothing here (it is drawn when its tab opens)."""
    select(client, "decoder.cross_attn", 1, 2, query=1)
    query, fig = client.predict(api_name="/head_computation")
    assert query == fig == {"__type__": "update"}  # gr.skip(): nothing sent


def test_attribution_api(url):
    out = Client(url, verbose=False).predict(SRC, "de-en", 1, 16, api_name="/attribution")
    S = len(out["src_tokens"])
    assert out["methods"] == list(METHODS) and out["position"] == 1
    assert all(len(out["scores"][m]) == S for m in METHODS)
    alti = np.array(out["scores"]["alti"])
    assert (alti >= 0).all() and alti.sum() == pytest.approx(out["source_share"], abs=1e-6)
    assert out["source_share"] + out["target_share"] == pytest.approx(1.0, abs=1e-6)
    rho = np.array(out["correlations"], dtype=float)
    assert rho.shape == (6, 6) and np.allclose(np.diag(rho)[~np.isnan(np.diag(rho))], 1.0)
    assert out["token"] == out["output_tokens"][1]


def test_attribution_api_rejects_bad_input(url):
    c = Client(url, verbose=False)
    with pytest.raises(Exception, match="empty"):
        c.predict("   ", "de-en", 0, 16, api_name="/attribution")
    with pytest.raises(Exception, match="whole number"):
        c.predict(SRC, "de-en", "first", 16, api_name="/attribution")


SEL = ("decoder.cross_attn", 0, 0, 0, None, "words", "grid", "shared")  # the shared selection's controls


def attribution(c, position=0, steps=16, units="words") -> dict:
    """Computation → Attribution opened (a registered view: drawn for the current run)."""
    sel = (*SEL[:5], units, *SEL[6:])
    return named(c, c.src, selected(c, sel, position, steps, api_name="/attribution_view"), "attribution_view")


def forced_result(c) -> dict:
    """Computation → Forced decoding opened."""
    return named(c, c.src, selected(c, SEL, api_name="/forced_result_view"), "forced_result_view")


def force(c, src=SRC, ref=REF) -> dict:
    select(c, "decoder.cross_attn", 0, 0, query=1)
    return named(c, c.src, c.predict(src, ref, "de-en", api_name="/forced_view"),
                 "forced_view")


def test_attribution_view(client):
    open_section(client)
    a = attribution(client)
    md, table = a["attr_md"], a["attr_table"]
    assert "ALTI+" in md and "Spearman" in md
    assert len(plot(a["attr_plot"])["data"]) >= 2
    assert table["headers"] == ["source", *METHODS]
    assert [row[0] for row in table["data"]] == ["<bos>", "Zwei", "Hunde", "spielen", "im", "Schnee", ".", "<eos>"]
    assert a["attr_pos"]["value"] == 0 and len(a["attr_pos"]["choices"]) > 1


def test_a_new_run_never_shows_the_last_runs_attribution_or_forced_decoding(client):
    """Attribution and Forced decoding are registered views: opened after a new run, each draws that run
    (the attribution of its first token, the hint that it was decoded), never the previous one."""
    assert attribution(client, position=1)["attr_pos"]["value"] == 0  # first opened on this run: its first token
    md, _, table = client.predict(1, 16, "words", api_name="/attribution_pick")
    assert "Hunde" in json.dumps(table) and "ALTI+" in md
    again = attribution(client, position=1)  # opened again on the same run and token: left as the pick drew it
    assert all(v == {"__type__": "update"} for v in again.values()), again
    assert "perplexity" in force(client)["forced_md"]
    # Force drew its view with the forced run's stamp: opening it again redraws nothing
    assert all(v == {"__type__": "update"} for v in forced_result(client).values())
    # the forced run's attribution: its output tokens are the reference's, the position starts at 0
    a = attribution(client, position=1)
    assert [c[0].split(": ", 1)[1] for c in a["attr_pos"]["choices"]][:3] == ["Two", "dogs", "are"]
    assert a["attr_pos"]["value"] == 0
    client.predict("Eine Frau liest ein Buch im Park.", "de-en", "greedy", 4, 30, api_name="/translate_stream")
    assert "was decoded" in forced_result(client)["forced_md"]
    a = attribution(client, position=3)
    assert [row[0] for row in a["attr_table"]["data"]][:3] == ["<bos>", "Eine", "Frau"]
    assert a["attr_pos"]["value"] == 0 and not any("dogs" in c[0] for c in a["attr_pos"]["choices"])
    # Units pool the attribution held for this run again (no second model call needed): pieces = words here
    assert attribution(client, units="pieces")["attr_table"]["data"] == a["attr_table"]["data"]


def test_forced_decoding_becomes_the_current_run(client):
    out = force(client)
    assert out["run_status"].startswith("✓ forced")
    assert "perplexity" in out["forced_md"] and "teacher-forced" in out["run_bar"]
    assert out["translation"] == REF
    ref_tokens = ["Two", "dogs", "are", "playing", "in", "the", "snow", ".", "<eos>"]
    assert [c[0].split(": ", 1)[1] for c in attribution(client)["attr_pos"]["choices"]] == ref_tokens
    bars = plot(out["forced_plot"])["data"][0]
    assert len(decode(bars["y"])) == len(ref_tokens)
    assert ((decode(bars["y"]) >= 0) & (decode(bars["y"]) <= 100.0001)).all()
    # every view now shows the forced run: the attention map's rows are the reference, step by step
    select(client, "decoder.cross_attn", view="head")
    fig = client.predict(api_name="/attention_view")[0]
    rows = [t for ax in plot(fig)["layout"].values() if isinstance(ax, dict) for t in ax.get("ticktext", [])]
    assert any("→dogs" in r for r in rows) and any("→snow" in r for r in rows)


def test_forced_decoding_needs_a_reference(client):
    select(client, "decoder.cross_attn", 0, 0, query=1)
    out = named(client, client.src, client.predict(SRC, "  ", "de-en", api_name="/forced_view"), "forced_view")
    assert "reference" in out["forced_md"]
    assert out["run_status"] == {"__type__": "update"}  # the current run is untouched


def test_embedding_steps(client):
    pos, fig = client.predict("encoder", 2, api_name="/embedding_steps")
    f = plot(fig)
    assert pos["value"] == 2
    assert [t["name"] for t in f["data"] if t.get("type") == "bar"][:4]
    assert "√d_model" in f["layout"]["title"]["text"]


def test_export_has_every_hook_point(client):
    files = client.predict("greedy", 4, 30, api_name="/export_run")
    npz = next(f for f in files if str(f).endswith(".npz"))
    keys = set(np.load(npz).keys())
    for name in ("decoder.layers.1.cross_attn.hook_q", "decoder.layers.1.cross_attn.hook_z",
                 "decoder.layers.1.cross_attn.hook_result", "decoder.layers.0.hook_resid_post",
                 "encoder.layers.0.ff.hook_post", "hook_logits"):
        assert any(k == name or k.startswith(name + "#") for k in keys), (name, sorted(keys)[:20])
