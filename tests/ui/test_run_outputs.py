"""The outputs a new run refreshes are declared once (``Shell.on_run`` per section) and every event that
makes a run refreshes exactly those, each component once."""
from __future__ import annotations

import pytest

from tests.app_fixtures import make_checkpoint


@pytest.fixture(scope="module")
def config(tmp_path_factory):
    import app
    root = tmp_path_factory.mktemp("ckpt")
    make_checkpoint(root / "de-en", "de", "en")
    demo = app.build_app(root, device="cpu", warm=False)
    cfg = demo.get_config_file()
    elem = {c["id"]: c.get("props", {}).get("elem_id") or f"{c['type']}#{c['id']}" for c in cfg["components"]}
    return {d["api_name"]: [elem[i] for i in d["outputs"]] for d in cfg["dependencies"] if d.get("api_name")}


def test_no_event_lists_an_output_twice(config):
    assert {name: outs for name, outs in config.items() if len(set(outs)) != len(outs)} == {}


def test_every_event_that_makes_a_run_refreshes_the_same_outputs(config):
    selection = set(config["selection"])  # the stored selection, which the builder writes
    # the events the replay follows write the selection fitted to their run, so it reads that with no build
    assert selection <= set(config["translate_stream"]) and selection <= set(config["deep_link"])
    run_outputs = set(config["translate_stream"]) - {"run-status"} - selection
    assert {"translation", "attn-plot", "watch-heads", "run-bar", "src-chips"} <= run_outputs
    for name in ("deep_link", "forced_view", "preset_back"):  # the page's first run, a forced run, Back
        assert run_outputs <= set(config[name]), name
