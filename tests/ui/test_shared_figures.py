"""Figures drawn once for every visitor of the same view of the same result (ui/present/shared.py): one draw per
(result, picks), the very figure a fresh draw makes, gone with the result, a bounded shelf; in the app, two
visitors who translate the same sentence are sent the same map, drawn once, and other picks draw anew; two visitors
of one tour stop share its working and its figure."""
from __future__ import annotations

import gc
import json
from dataclasses import replace

import plotly.graph_objects as go
import pytest

from tests.app_fixtures import make_checkpoint
from ui.present import views
from ui.present.shared import FigureShelf, SharedFigure
from ui.sections import translate
from ui.state import Selection


class Result:  # a result the shelf holds weakly, as it holds a cached translation
    pass


def drawing(log: list, title: str):
    def draw():
        log.append(title)
        return go.Figure(go.Heatmap(z=[[0.25, 0.75], [1.0, 0.0]]), layout=dict(title=title))
    return draw


def test_a_view_is_drawn_once_per_result_and_picks_and_reads_as_the_figure_drawn():
    shelf, log, a, b = FigureShelf(), [], Result(), Result()
    first = shelf.get(a, ("map", 0), drawing(log, "layer 0"))
    assert shelf.get(a, ("map", 0), drawing(log, "again")) is first and log == ["layer 0"]
    assert shelf.get(a, ("map", 1), drawing(log, "layer 1")).layout.title.text == "layer 1"  # other picks
    assert shelf.get(b, ("map", 0), drawing(log, "b")).layout.title.text == "b"  # another result
    assert log == ["layer 0", "layer 1", "b"] and shelf.drawn == 3
    fresh = drawing([], "layer 0")()
    assert first.to_json() == fresh.to_json() and json.loads(first.to_json())["data"][0]["type"] == "heatmap"
    assert first.figure.to_dict() == fresh.to_dict()
    first.figure.update_layout(title="edited")  # a read is a copy: what is sent stays as drawn
    assert first.layout.title.text == "layer 0"
    # no result: the key alone names the view
    assert shelf.get(None, ("curves", (1, 2)), drawing(log, "c")) is shelf.get(None, ("curves", (1, 2)), drawing(log, "d"))


def test_a_results_figures_go_with_it_and_the_shelf_is_bounded():
    shelf, log = FigureShelf(max_entries=3), []
    gone = Result()
    shelf.get(gone, "map", drawing(log, "gone"))
    assert len(shelf) == 1
    del gone
    gc.collect()
    assert len(shelf) == 0
    kept = [Result() for _ in range(4)]
    for i, r in enumerate(kept):
        shelf.get(r, "map", drawing(log, f"r{i}"))
    assert len(shelf) == 3
    shelf.get(kept[1], "map", drawing(log, "again"))  # still there
    shelf.get(kept[0], "map", drawing(log, "r0 again"))  # the least recently used left first
    assert log[-1] == "r0 again" and "again" not in log
    # an owner that cannot be held weakly is drawn every time
    assert shelf.get(7, "map", drawing(log, "x")).to_json() and shelf.get(7, "map", drawing(log, "y"))
    assert log[-2:] == ["x", "y"]
    assert isinstance(shelf.get(kept[2], "map", drawing(log, "z")), SharedFigure)


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    import app
    root = tmp_path_factory.mktemp("ckpt")
    make_checkpoint(root / "de-en", "de", "en")
    return app.build_app(root, device="cpu", warm=False)


def test_two_visitors_of_one_sentence_are_sent_one_drawing_of_each_figure(demo, monkeypatch):
    shelf = FigureShelf()
    monkeypatch.setattr("ui.present.shared.SHELF", shelf)
    fn = next(f.fn for f in demo.fns.values() if f.api_name == "translate_stream")
    p, attn = demo.shell.translate, demo.shell.attention
    first = fn("haus katze hund", "de-en", "greedy", 4, 12, replace(Selection(), section="tour"))
    drawn = shelf.drawn
    second = fn("haus katze hund", "de-en", "greedy", 4, 12, replace(Selection(), section="tour"))
    run1, run2 = first[demo.shell.run_state], second[demo.shell.run_state]
    assert run1.id != run2.id and run1.tr is run2.tr  # two visitors' runs of one cached translation
    assert drawn >= 2 and shelf.drawn == drawn  # the second visitor drew nothing
    for out in (p.watch_heads, attn.attn_plot):
        assert second[out] is first[out]
    fresh = views.watch_heads(run2, None, translate.outlined(Selection().kind, Selection().layer, Selection().head))
    assert second[p.watch_heads].to_json() == fresh.to_json()
    other = fn("haus katze hund", "de-en", "greedy", 4, 12, replace(Selection(), section="tour", layer=1))
    assert shelf.drawn > drawn and other[attn.attn_plot] is not first[attn.attn_plot]  # another pick: drawn


def test_two_visitors_of_one_tour_stop_share_its_working_and_its_figure(demo, monkeypatch):
    from ui.present import tour
    from ui.sections import tour as tour_section
    shelf, made = FigureShelf(), []
    monkeypatch.setattr("ui.present.shared.SHELF", shelf)
    real = tour.stop
    monkeypatch.setattr(tour, "stop", lambda t, index, choice=None: made.append((index, choice)) or real(t, index, choice))
    fn = next(f.fn for f in demo.fns.values() if f.api_name == "translate_stream")
    p = demo.shell.tour
    runs = [fn("haus katze hund", "de-en", "greedy", 4, 12, replace(Selection(), section="tour"))[demo.shell.run_state]
            for _ in range(2)]
    outs = p.outputs(demo.shell)
    a, b = (dict(zip(outs, tour_section.draw(demo.shell, r, 2, "words"))) for r in runs)
    assert made == [(2, None)] and b[p.plot] is a[p.plot] and b[p.body] == a[p.body]
    fresh = real(tour.TourRun(runs[1], demo.shell.lm(runs[1]), "words", demo.shell.reg_key), 2)
    assert b[p.plot].to_json() == fresh.figure.to_json() and b[p.body] == "\n\n".join(fresh.sentences)
    pick = next(v for _, v in fresh.trial.choices if v != fresh.trial.default)
    picked = dict(zip(outs, tour_section.draw(demo.shell, runs[1], 2, "words", pick=pick)))
    assert (2, pick) in made[1:] and picked[p.plot] is not a[p.plot]  # another pick: worked out anew
