"""Continue from here in the launched app: /continue_from (gradio_client), the Generation and beam-tree
events that make a branch the current run, the run history, the link and the export of a branch."""
from __future__ import annotations

from types import SimpleNamespace
from urllib.parse import parse_qsl, urlsplit

import pytest

from model.analysis import readouts
from tests.app_fixtures import launch, make_checkpoint, named, shown
from tests.ui.test_preset_back import handler, outputs
from ui.sections.analysis import run_settings
from ui.state import BeamView, ModelShape, RunInputs, Selection, from_query, link_url

DE = "Zwei Hunde spielen im Schnee."
CROSS = "decoder.cross_attn"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("checkpoints")
    make_checkpoint(root / "de-en", "de", "en", seed=0)
    demo, url = launch(root, warm=False)
    yield demo, url, root
    demo.close()


def other_token(vocab, not_this: str) -> str:
    """A target word that is not ``not_this``: forcing it makes a real branch."""
    return next(t for t in ("dogs", "snow", "woman", "park") if t != not_this and t in vocab.stoi)


def test_continue_from_api(client, server):
    base = client.predict(DE, "de-en", 1, 20, api_name="/translate")
    toks = base["output_tokens"]
    pick = other_token(server[0].registry.models["de-en"].tgt_vocab, toks[1])
    out = client.predict(DE, "de-en", [toks[0], pick], 1, 20, api_name="/continue_from")
    assert set(base) <= set(out)  # the /translate JSON, plus the branch
    assert out["output_tokens"][:2] == [toks[0], pick]
    b = out["branch"]
    assert b["prefix_tokens"] == [toks[0], pick] and b["prefix_len"] == 2 and b["forced_steps"] == [0, 1]
    assert b["description"] == "forced prefix up to step 1, then greedy"
    # the forced step's top-k is the model's own: the plain run's choice leads it there
    assert out["steps"][1]["token"] == pick and out["steps"][1]["topk"][0][0] == base["steps"][1]["topk"][0][0]
    # ids work as well as tokens; the model's own prefix gives back the plain run
    same = client.predict(DE, "de-en", ",".join(map(str, b["prefix_ids"][:1])), 1, 20, api_name="/continue_from")
    assert same["output_tokens"] == toks and same["branch"]["prefix_len"] == 1
    beam = client.predict(DE, "de-en", [pick], 3, 20, api_name="/continue_from")
    assert beam["output_tokens"][0] == pick and beam["branch"]["then"] == "beam 3"
    for bad, why in (("zebra-not-a-word", "not in the target vocabulary"), ("", "empty"), ([2], "never produces")):
        with pytest.raises(Exception, match=why):
            client.predict(DE, "de-en", bad, 1, 20, api_name="/continue_from")


def test_continue_step_becomes_the_run_and_history_walks_back_and_forth(client, server):
    t = named(client, client.src, client.predict(DE, "de-en", "greedy", 4, 20, api_name="/translate_stream"))
    first = t["translation"]
    tokens = first.split()
    pick = other_token(server[0].registry.models["de-en"].tgt_vocab, tokens[1])
    o = outputs(client, client.predict(1, pick, api_name="/continue_step"), "continue_step")
    assert o["run_status"].startswith("✓ branch")
    assert o["translation"].split()[:2] == [tokens[0], pick]
    assert "forced prefix up to step 1, then greedy" in o["run_bar"] and "Branch:" in o["notice"]
    assert shown(o["step_slider"])["value"] == 1  # Generation opens on the forced step
    assert o["hist_md"] == "run 2 of 2"
    query = dict(parse_qsl(urlsplit(o["link_box"]).query))
    assert len(query["prefix"].split(",")) == 2
    back = outputs(client, client.predict(api_name="/history_back"), "history_back")
    assert back["translation"] == first and back["hist_md"] == "run 1 of 2"
    assert "forced prefix" not in back["run_bar"] and back["run_status"].startswith("✓ history")
    fwd = outputs(client, client.predict(api_name="/history_forward"), "history_forward")
    assert fwd["translation"] == o["translation"] and fwd["hist_md"] == "run 2 of 2"
    assert "forced prefix up to step 1" in fwd["run_bar"]
    # nothing picked: a sentence beside the button, the run unchanged
    none = outputs(client, client.predict(1, None, api_name="/continue_step"), "continue_step")
    assert "Pick a token" in none["branch_md"]


def _translate(demo, decoding="greedy"):
    values = handler(demo, "translate_stream")(DE, "de-en", decoding, 4, 20, _sel())
    return values["Run"]


def _sel(section="generation", subview=None) -> Selection:
    """The Selection state as the controls write it (handlers take it as one value)."""
    return Selection.of(CROSS, 0, 0, 0, None, "words", "grid", "shared", section, subview or "")


def test_a_link_restores_a_branch(server):
    demo = server[0]
    lm = demo.registry.models["de-en"]
    run = _translate(demo)
    prefix = (run.tr.output_ids[0], lm.tgt_vocab.stoi[other_token(lm.tgt_vocab, run.tr.output_tokens[1])])
    inputs = RunInputs(model="de-en", text=DE, max_len=20, prefix=prefix)
    url = link_url("http://h/", inputs, Selection(section="generation", subview="steps", step=1))
    assert "prefix=" in url
    load = next(f for f in demo.fns.values() if f.api_name == "deep_link").fn
    request = SimpleNamespace(query_params=dict(parse_qsl(urlsplit(url).query)), headers={})
    values = {getattr(c, "elem_id", None) or type(v).__name__: v for c, v in load(1440, request).items()}
    restored = values["Run"]
    assert restored.inputs.prefix == prefix and restored.tr.prefix_len == 2
    assert tuple(restored.tr.output_ids[:2]) == prefix
    assert "forced prefix up to step 1, then greedy" in values["run-bar"]
    # a prefix this model cannot take is named, and the run decoded from the start
    bad = dict(request.query_params, prefix="2,99999")
    values = {getattr(c, "elem_id", None) or type(v).__name__: v
              for c, v in load(1440, SimpleNamespace(query_params=bad, headers={})).items()}
    assert values["Run"].tr.prefix_len == 0 and "prefix cannot be forced" in values["link-notice"]
    assert "prefix cannot be forced" not in values["notice"]  # said once, above the sections


def test_link_round_trip_and_bad_prefix():
    shapes = {"de-en": ModelShape(2, 2, 4)}
    inputs = RunInputs(model="de-en", text=DE, decoding="beam", beam=3, prefix=(7, 8, 9))
    url = link_url("http://h/", inputs, Selection())
    r = from_query(dict(parse_qsl(urlsplit(url).query)), shapes)
    assert r.inputs == inputs and r.problems == [] and r.inputs.kind.startswith("forced prefix up to step 2, then beam")
    r = from_query({"text": DE, "prefix": "7,x"}, shapes)
    assert r.inputs.prefix == () and "prefix" in r.problems[0]


def test_continue_from_a_beam_tree_node_and_the_export(server):
    demo = server[0]
    lm = demo.registry.models["de-en"]
    run = _translate(demo, "beam")
    view = BeamView("de-en", run.tr, readouts.beam_tree_data(lm, run.tr), run.id)
    node = next(n for n in view.tree.nodes if n.step == 2 and n.status == "pruned")
    values = handler(demo, "continue_node")(run, view, node.id, None, _sel("generation", "beam-tree"))
    new = values["Run"]
    ids, n = [], node
    while n.parent is not None:  # up to the root by hand
        ids.append(n.token_id)
        n = view.tree.nodes[n.parent]
    assert new.tr.output_ids[:3] == ids[::-1] and new.tr.prefix_len == 3
    assert new.tr.beam is not None and "forced prefix up to step 2, then beam 4" in values["run-bar"]
    assert values["beam-md"].startswith("**Chosen:**")  # the tree on screen is redrawn for the branch
    assert values["History"].current is new
    settings = run_settings(new)
    assert settings["branch"]["prefix_ids"] == ids[::-1] and settings["inputs"]["prefix"] == ids[::-1]
    assert settings["run"].startswith("forced prefix up to step 2, then beam 4")
    other = handler(demo, "continue_node")(new, view, node.id, None, _sel())
    assert "earlier run" in other["node-md"]


def test_the_run_counter_counts_a_links_run_a_forced_run_and_back(server):
    """"run i of n" from the first run on (a link's run is run 1 of 1); Force the reference records the
    forced run at once (run 2 of 2, not at the next ◀); ◀ then shows run 1 of 2."""
    demo = server[0]
    run = _translate(demo)
    record = next(f.fn for f in demo.fns.values() if getattr(f.fn, "__name__", "") == "_record")
    hist, label, *_ = record(run, None)  # what every event of Translate's chain (a link's load too) runs after it
    assert label == "run 1 of 1"
    forced = handler(demo, "forced_view")(SimpleNamespace(headers={}), run, DE, "Two dogs play in the snow.",
                                          "de-en", Selection(section="computation", subview="forced"), hist)
    assert forced["run-status"].startswith("✓ forced") and forced["hist-md"] == "run 2 of 2"
    new = forced["Run"]
    back = handler(demo, "history_back")(new, forced["History"], _sel("computation", "forced"))
    assert back["Run"].id == run.id and back["hist-md"] == "run 1 of 2"


def test_only_a_finished_hypothesis_is_called_finished(server):
    """The tree colours a finished hypothesis's whole path; the node list names only its last node
    "finished" (the inner ones lie on its path)."""
    demo = server[0]
    run = _translate(demo, "beam")
    view = BeamView("de-en", run.tr, readouts.beam_tree_data(demo.registry.models["de-en"], run.tr), run.id)
    nodes = {n.id: n for n in view.tree.nodes}
    assert any(n.status != "pruned" and not n.final for n in nodes.values())  # inner nodes of a finished path
    choices = next(f.fn for f in demo.fns.values() if f.api_name == "beam_nodes")(view).choices
    assert choices and all((", finished" in label) == nodes[i].final for label, i in choices)
    assert any(", on the chosen path" in label for label, _ in choices)


def test_branch_events_refresh_every_run_output(server):
    cfg = server[0].get_config_file()
    elem = {c["id"]: c.get("props", {}).get("elem_id") or f"{c['type']}#{c['id']}" for c in cfg["components"]}
    outs = {d["api_name"]: [elem[i] for i in d["outputs"]] for d in cfg["dependencies"] if d.get("api_name")}
    run_outputs = set(outs["translate_stream"])
    for name in ("continue_step", "continue_node", "history_back", "history_forward"):
        assert run_outputs <= set(outs[name]) and len(set(outs[name])) == len(outs[name]), name
