"""The registry of views: every view declares the Selection fields it reads; changing one of them (or the
run) marks the view for recomputation and, where the view is drawn from (run, selection) alone, changes
what it draws; a view never reads a field it does not declare."""
from __future__ import annotations

import json
from dataclasses import fields, replace

import pytest

from model.engine.decoding import DecodeOptions, translate
from model.engine.transformer import CROSS, ENC_SELF
from ui.state import SUBVIEWS, Run, Selection
from ui.present.views import REGISTRY, Env, stamp_of

BASE = Selection(kind=CROSS, layer=0, head=0, step=0, query=0, units="words", view="head", scale="shared")
OTHER = dict(kind=ENC_SELF, layer=1, head=1, step=1, query=1, units="pieces", view="mean", scale="head",
             section="attention", subview="rollout")


class Recording:
    """A Selection that notes which fields are read."""

    def __init__(self, sel: Selection):
        self._sel, self.read = sel, set()

    # a property of the selection reads the fields it is made of
    MADE_OF = {"head_ref": ("kind", "layer", "head")}

    def __getattr__(self, name):
        self.read.update(self.MADE_OF.get(name, (name,)))
        return getattr(self._sel, name)


@pytest.fixture
def run(tiny_lm):
    tr = translate(tiny_lm, "haus katze hund", DecodeOptions(max_len=6))
    return Run.of(tiny_lm, "de-en", tr)


def _json(out) -> str:
    return json.dumps([f.to_plotly_json() if hasattr(f, "to_plotly_json") else f for f in
                       (out if isinstance(out, list) else [out])], default=str, sort_keys=True)


def test_every_section_and_sub_view_is_registered():
    assert set(REGISTRY) == {f"{s}/{v}" if v else s for s, subs in SUBVIEWS.items() for v in subs}
    sel_fields = {f.name for f in fields(Selection)}
    assert all(spec.reads <= sel_fields for spec in REGISTRY.values())


@pytest.mark.parametrize("name", sorted(n for n, s in REGISTRY.items() if s.draw is not None))
def test_a_view_reads_only_what_it_declares(name, run, tiny_lm):
    """Views drawn with a model call (draw None) are covered by their stamps below."""
    spec = REGISTRY[name]
    rec = Recording(BASE)
    spec.draw(run, rec, Env(tiny_lm))
    assert rec.read <= spec.reads, rec.read - spec.reads


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_a_changed_field_or_run_marks_the_view_stale(name, run, tiny_lm):
    spec = REGISTRY[name]
    before = stamp_of(name, run, BASE)
    for f in fields(Selection):
        after = stamp_of(name, run, replace(BASE, **{f.name: OTHER[f.name]}))
        assert (after != before) == (f.name in spec.reads), f.name
    new_run = Run.of(tiny_lm, "de-en", run.tr)
    assert stamp_of(name, new_run, BASE) != before


@pytest.mark.parametrize("name", sorted(n for n, s in REGISTRY.items() if s.draw is not None and s.reads))
def test_a_changed_field_changes_what_is_drawn(name, run, tiny_lm):
    spec = REGISTRY[name]
    before = _json(spec.draw(run, BASE, Env(tiny_lm)))
    for f in sorted(spec.reads):
        if f == "units" and run.src_spans is None:
            continue  # a word-level model's words are its tokens: the stamp alone marks the change
        after = _json(spec.draw(run, replace(BASE, **{f: OTHER[f]}), Env(tiny_lm)))
        assert after != before, f


def test_an_export_says_what_kind_of_run_it_holds(tiny_lm):
    from model.analysis.computation import force
    from ui.sections.analysis import run_settings
    from ui.state import RunInputs
    tr = translate(tiny_lm, "haus katze hund", DecodeOptions(max_len=6))
    assert run_settings(Run.of(tiny_lm, "de-en", tr, inputs=RunInputs("de-en", "haus katze hund")))["run"] == "greedy"
    beam = translate(tiny_lm, "haus katze hund", DecodeOptions(max_len=6, beam=3))
    assert run_settings(Run.of(tiny_lm, "de-en", beam))["run"] == "beam"
    forced = force(tiny_lm, "haus katze hund", "katze hund")
    inputs = RunInputs("de-en", "haus katze hund", reference="katze hund")
    s = run_settings(Run.of(tiny_lm, "de-en", forced.translation, forced=True, inputs=inputs,
                            forced_loss=[float(x) for x in forced.loss]))
    assert (s["run"], s["decoding"], s["teacher_forced"], s["reference"]) == ("teacher-forced", "teacher-forced", True,
                                                                             "katze hund")
    assert s["per_token_loss"] == pytest.approx(forced.loss.tolist()) and len(s["per_token_loss"]) == 3


def test_forced_decoding_is_drawn_from_the_run_it_shows(tiny_lm):
    """Computation → Forced decoding is a registered view drawn from (run, selection) alone: a forced run's
    readout, and for any other run (a later Translate) the hint, never the previous forced run's."""
    from model.analysis.computation import force
    from ui.state import RunInputs
    spec = REGISTRY["computation/forced"]
    forced = force(tiny_lm, "haus katze hund", "katze hund")
    fr = Run.of(tiny_lm, "de-en", forced.translation, forced=True, forced_detail=forced,
                inputs=RunInputs("de-en", "haus katze hund", reference="katze hund"))
    md, fig = spec.draw(fr, BASE, Env(tiny_lm))
    assert f"{forced.perplexity:.2f}" in md and "perplexity" in fig.layout.title.text
    later = Run.of(tiny_lm, "de-en", translate(tiny_lm, "katze hund", DecodeOptions(max_len=6)))
    md, fig = spec.draw(later, BASE, Env(tiny_lm))
    assert "was decoded" in md and "perplexity" not in _json(fig)
    assert stamp_of(spec.name, later, BASE) != stamp_of(spec.name, fr, BASE)


def test_attribution_and_forced_decoding_are_registered_sub_views(tmp_path, monkeypatch):
    """Both are put on the page by ``mount``: they carry a stamp and are drawn when opened, like Alignment."""
    import gradio as gr

    import app
    from tests.app_fixtures import make_checkpoint
    from ui import sections
    make_checkpoint(tmp_path / "de-en", "de", "en")
    made = []
    real = sections.SubView.__init__

    def record(self, name, *a, **k):
        made.append(name)
        real(self, name, *a, **k)
    monkeypatch.setattr(sections.SubView, "__init__", record)
    demo = app.build_app(tmp_path, device="cpu", warm=False)
    assert {"computation/attribution", "computation/forced", "attention/alignment", "attention/rollout"} <= set(made)
    assert isinstance(demo, gr.Blocks)
