"""The session's state and the link that reproduces it: every (run inputs, selection) pair survives a
link; a bad parameter is named, never silently replaced."""
from __future__ import annotations

from urllib.parse import parse_qsl, urlsplit

from hypothesis import given, settings
from hypothesis import strategies as st

from model.engine.names import HeadRef
from model.engine.transformer import ATTN_KINDS
from ui.settings import MAX_BEAM, MAX_OUTPUT_TOKENS
from ui.state import (SCALES, SUBVIEWS, UNITS, VIEWS, ModelShape, RunInputs, Selection, Toggles, from_query,
                      link_url)

SHAPES = {"de-en": ModelShape(4, 4, 4), "en-de": ModelShape(6, 6, 4)}
TEXT = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=80).filter(lambda t: t.strip())


@st.composite
def screens(draw):
    model = draw(st.sampled_from(sorted(SHAPES)))
    shape = SHAPES[model]
    heads = draw(st.lists(st.tuples(st.sampled_from(ATTN_KINDS), st.integers(0, 3), st.integers(0, 3)),
                          max_size=3, unique=True))
    toggles = Toggles(pad_to=draw(st.integers(0, 64)), padding=draw(st.booleans()), causal=draw(st.booleans()),
                      positional=draw(st.booleans()), heads=tuple(sorted(heads)),
                      src=tuple(sorted(draw(st.sets(st.integers(0, 40), max_size=4)))))
    inputs = RunInputs(model=model, text=draw(TEXT), decoding=draw(st.sampled_from(["greedy", "beam"])),
                       beam=draw(st.integers(2, MAX_BEAM)), max_len=draw(st.integers(1, MAX_OUTPUT_TOKENS)),
                       reference=draw(st.none() | TEXT), toggles=toggles)
    kind = draw(st.sampled_from(ATTN_KINDS))
    section = draw(st.sampled_from(sorted(SUBVIEWS)))
    sel = Selection(kind=kind, layer=draw(st.integers(0, shape.layers(kind) - 1)),
                    head=draw(st.integers(0, shape.n_heads - 1)), step=draw(st.integers(0, 1000)),
                    query=draw(st.none() | st.integers(0, 1000)), units=draw(st.sampled_from(UNITS)),
                    view=draw(st.sampled_from(VIEWS)), scale=draw(st.sampled_from(SCALES)), section=section,
                    subview=draw(st.sampled_from(SUBVIEWS[section])))
    return inputs, sel


@settings(max_examples=300, deadline=None)
@given(screens())
def test_a_link_restores_the_run_inputs_and_the_selection(screen):
    inputs, sel = screen
    url = link_url("http://h/app/?old=1#x", inputs, sel)
    assert url.startswith("http://h/app/?")
    restored = from_query(dict(parse_qsl(urlsplit(url).query, keep_blank_values=True)), SHAPES)
    assert restored.problems == []
    assert (restored.inputs, restored.sel) == (inputs, sel)


def test_bad_parameters_are_named_not_silently_replaced():
    r = from_query({"text": "x", "model": "zz", "layer": "99", "head": "-1", "section": "bogus", "view": "v",
                    "ablate": "cross.9.0", "colour": "red"}, SHAPES)
    said = " ".join(r.problems)
    for key in ("model='zz'", "layer='99'", "head='-1'", "section='bogus'", "view='v'", "ablate=", "'colour'"):
        assert key in said, key
    assert (r.inputs.model, r.sel.layer, r.sel.head, r.sel.section, r.sel.view) == ("de-en", 0, 0, "translate", "grid")
    assert r.inputs.toggles.heads == ()
    assert from_query({"model": "de-en"}, SHAPES) is None


def test_layer_bounds_follow_the_linked_model():
    assert from_query({"text": "x", "model": "en-de", "layer": "5"}, SHAPES).sel.layer == 5
    r = from_query({"text": "x", "model": "de-en", "layer": "5"}, SHAPES)
    assert r.sel.layer == 0 and r.problems


def test_run_kind_names_what_made_the_run():
    assert RunInputs("de-en", "x").kind == "greedy"
    assert RunInputs("de-en", "x", decoding="beam", beam=3).kind == "beam"
    assert RunInputs("de-en", "x", reference="y").kind == "teacher-forced"
    assert RunInputs("de-en", "x", toggles=Toggles(causal=False)).kind == "greedy, intervened"


def test_selection_of_makes_control_values_valid_and_fits_a_smaller_model():
    sel = Selection.of("enc", 5.0, "3", None, "", "words", "head", "bogus", "attention", "nope")
    assert sel == Selection(kind="encoder.self_attn", layer=5, head=3, view="head", section="attention",
                            subview="maps")
    assert sel.fit(ModelShape(4, 4, 2)) == Selection(kind="encoder.self_attn", layer=3, head=1, view="head",
                                                     section="attention", subview="maps")


def test_one_reading_of_an_index_and_one_table_of_short_kind_names():
    """Every layer, head, step and position a control, a link or the bench carries is read by one function;
    the short kind names are one table, the engine's, which the link, the labels and Kind.of all use."""
    from model.engine import names
    from ui import present, state as st
    from ui.present import whatif
    assert [st.read_index(v) for v in ("3", 2.0, -4, None, "x")] == [3, 2, 0, 0, 0]
    assert st.read_index("9", n=4) == 3 and st.read_index(None, 5, n=4) == 3  # the default below n too
    assert Selection.of(layer="2", head=-1, step=None).layer == 2
    bench = whatif.bench_link("a", "b", "z", "none", Selection.of("cross", "1", "x").head_ref, "decoder", "post", "", -2,
                              "", "patch")
    assert (bench.layer, bench.head, bench.step) == (1, 0, 0)
    assert not hasattr(present, "KIND_SHORT")  # the labels read the engine's table itself
    assert str(HeadRef("decoder.cross_attn", 1, 2)) == "cross L1 H2"
    assert all(names.Kind.of(short) is kind for kind, short in names.SHORT_NAMES.items())
    assert {k: v for k, v in vars(st).items() if isinstance(v, dict) and set(v) == set(names.SHORT_KINDS)} \
        in ({}, {"SHORT_KINDS": names.SHORT_KINDS})  # no second table of its own
    assert short_kind_tables() == []


def hand_clamps(root=None) -> list[str]:
    """``max(0, min(int(x), …))`` written out in ui/: a layer, head, step or frame read without read_index
    (options such as the beam size have other bounds). The tour's stop number is no selection field."""
    import ast
    from pathlib import Path
    root = root or Path(__file__).resolve().parents[2]
    found = []
    for p in (root / "ui").rglob("*.py"):
        if p.name == "tour.py":
            continue
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "max" and node.args \
                    and getattr(node.args[0], "value", None) == 0 and any(
                    isinstance(a, ast.Call) and getattr(a.func, "id", None) == "min" and any(
                        isinstance(b, ast.Call) and getattr(b.func, "id", None) == "int" for b in a.args)
                    for a in node.args):
                found.append(f"{p.relative_to(root)}:{node.lineno}")
    return found


def test_one_normaliser_per_index():
    """Every clamp of a layer, head, step, position or frame goes through state.read_index."""
    from ui.present import inside, learn, views
    assert hand_clamps() == []
    from ui.state import read_index as read  # the one normaliser: no wrapper of it beside
    assert (read("x", 9, 4), read("2", 0, 4), read(-3, 0, 4), read(1, 0, 0)) == (3, 2, 0, 0)
    assert (read("7", 0, 3), read(None, 0, 3), read("x", 0, 3)) == (2, 0, 0)
    assert not hasattr(inside, "clamp") and not hasattr(views, "clamp")
    fs = learn.FrameSet.__new__(learn.FrameSet)
    object.__setattr__(fs, "keys", ("a@1", "a@2"))
    assert (fs.key_at(5), fs.key_at("x")) == ("a@2", "a@1")


def test_the_clamp_check_finds_one(tmp_path):
    (tmp_path / "ui").mkdir()
    (tmp_path / "ui" / "v.py").write_text("def f(layer, n):\n    return max(0, min(int(layer), n - 1))\n",
                                          encoding="utf-8")
    assert hand_clamps(tmp_path) == ["ui/v.py:2"]


def short_kind_tables(root=None) -> list[str]:
    """Dict literals in ui/ and app.py that spell out the short kind names (a second table)."""
    import ast
    from pathlib import Path
    root = root or Path(__file__).resolve().parents[2]
    found = []
    for p in [*(root / "ui").rglob("*.py"), root / "app.py"]:
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Dict):
                words = {c.value for c in [*node.keys, *node.values] if isinstance(c, ast.Constant)}
                if {"enc", "cross"} <= words:
                    found.append(f"{p.relative_to(root)}:{node.lineno}")
    return found


def test_the_table_check_finds_a_second_table(tmp_path):
    (tmp_path / "ui").mkdir()
    (tmp_path / "app.py").write_text("", encoding="utf-8")
    (tmp_path / "ui" / "x.py").write_text("K = {'encoder.self_attn': 'enc', 'decoder.cross_attn': 'cross'}\n",
                                          encoding="utf-8")
    assert short_kind_tables(tmp_path) == ["ui/x.py:1"]
