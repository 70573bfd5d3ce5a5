"""The selection travels as one value: only the step that builds it reads the bar's kind, layer and head;
every view reads the one ``Selection`` it wrote, chained after it (never a copy the controls' own change
has not written yet)."""
from __future__ import annotations

import pytest

from tests.app_fixtures import make_checkpoint
from ui.sections import Shell

CROSS = "decoder.cross_attn"


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    import app
    root = tmp_path_factory.mktemp("ckpt")
    make_checkpoint(root / "de-en", "de", "en")
    return app.build_app(root, device="cpu", warm=False)


def _name(fn) -> str:
    return fn.api_name or fn.name


def _builds(fn) -> bool:
    return fn.fn is Shell.selection


def _elem(demo, block_id) -> str:
    return demo.blocks[block_id].elem_id or f"{type(demo.blocks[block_id]).__name__}#{block_id}"


def test_only_the_selection_builder_reads_the_bars_kind_layer_and_head(demo):
    shell = demo.shell
    bar = {shell.kind._id, shell.layer._id, shell.head._id}
    readers = [fn for fn in demo.fns.values() if bar & {b._id for b in fn.inputs}]
    assert readers, "the selection is built from the bar's controls somewhere"
    assert sorted(_name(fn) for fn in readers if not _builds(fn)) == []


def test_no_event_a_bar_control_triggers_reads_the_selection_before_it_is_built(demo):
    shell = demo.shell
    controls = {c._id for c in shell.selection_inputs()}
    stale = [_name(fn) for fn in demo.fns.values() if not _builds(fn)
             and any(block in controls for block, _ in fn.targets)
             and shell.sel_state in fn.inputs]
    assert stale == []


@pytest.mark.parametrize("api_name, fields", [
    ("attention_view", {"attn-kind", "attn-view", "attn-layer", "attn-head", "attn-units", "attn-scale"}),
    ("thumbnails", {"attn-kind", "attn-layer", "attn-head", "attn-units"}),
    ("head_computation", {"attn-kind", "attn-layer", "attn-head", "head-query"}),
    ("compare_maps", {"attn-kind", "attn-layer", "attn-head"}),
])
def test_a_view_follows_its_fields_through_the_built_selection(demo, api_name, fields):
    shell = demo.shell
    (view,) = [fn for fn in demo.fns.values() if fn.api_name == api_name]
    names = [_elem(demo, b._id) for b in view.inputs]
    assert view.inputs[:2] == [shell.run_state, shell.sel_state], names
    assert not {"attn-kind", "attn-layer", "attn-head", "attn-units", "attn-view", "attn-scale"} & set(names)
    built = demo.fns[view.trigger_after]  # the step it is chained after
    assert _builds(built) and built.outputs == [shell.sel_state]
    assert {(_elem(demo, block), event) for block, event in built.targets} == {(f, "input") for f in fields}


def test_a_panel_click_builds_the_selection_before_the_thumbnails_read_it(demo):
    shell = demo.shell
    (click,) = [fn for fn in demo.fns.values() if fn.api_name == "open_head"]
    built = [fn for fn in demo.fns.values() if fn.trigger_after == click._id]
    assert [_builds(fn) for fn in built] == [True]
    after = [fn for fn in demo.fns.values() if fn.trigger_after == built[0]._id]
    assert after and all(shell.sel_state in fn.inputs for fn in after)
    assert any(shell.translate.watch_heads in fn.outputs for fn in after)


def test_the_maps_answer_leaves_the_layer_box_alone_unless_the_kind_has_fewer_layers(demo):
    """A pick of the kind draws the maps; its answer must not restate the layer box's value, or a layer
    picked while it was drawn comes back as the older one. Only a layer the kind lacks is brought inside."""
    from ui.state import Selection
    fns = {f.api_name: f.fn for f in demo.fns.values() if f.api_name}
    values = fns["translate_stream"]("Zwei Hunde spielen.", "de-en", "greedy", 1, 8, Selection.of(CROSS))
    run = next(v for v in values.values() if type(v).__name__ == "Run")
    _, box = fns["attention_view"](run, Selection.of(CROSS, 1, 0))
    assert "value" not in box.constructor_args, box.constructor_args  # the choices only
    assert [v for _, v in box.choices] == [0, 1]
    _, box = fns["attention_view"](run, Selection.of(CROSS, 5, 0))  # past the last layer: brought inside
    assert box.constructor_args["value"] == 1
