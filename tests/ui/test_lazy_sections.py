"""What a new visitor's page carries: a section built when first opened (Watch it learn) is not on it, yet its
API names answer; the page's component count is pinned so that a section moved back onto it is noticed."""
from __future__ import annotations

import pytest

from tests.app_fixtures import make_checkpoint
from ui.state import Selection

# components on the page at load (``len(demo.blocks)``), Gradio's API stand-ins included; 439 before any section
# was built on opening
AT_LOAD = 428
LEARN_IDS = {"frame-md", "frame-scrub", "frame-curves", "form-plot", "toy-pairs", "toy-btn"}


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    import app
    root = tmp_path_factory.mktemp("ck")
    make_checkpoint(root / "de-en", "de", "en", seed=0)
    return app.build_app(root, device="cpu", warm=False)


def test_the_page_at_load_carries_no_lazy_section(demo):
    ids = {getattr(b, "elem_id", None) for b in demo.blocks.values()}
    assert not ids & LEARN_IDS
    assert len(demo.blocks) <= AT_LOAD, len(demo.blocks)
    # the section's render is there, waiting for its first opening
    assert len(demo.renderables) == 1


def test_the_lazy_sections_api_names_answer_at_load(demo):
    fns = {f.api_name: f for f in demo.fns.values() if f.api_name}
    for name in ("pick_frame", "head_forms", "train_toy", "compare_frame"):
        assert name in fns and fns[name].api_visibility == "undocumented", name
        assert not fns[name].targets, name  # called by name, triggered by nothing on the page
    run = fns["translate_stream"].fn("Zwei Hunde spielen im Schnee.", "de-en", "greedy", 4, 12, Selection())
    run = next(v for v in run.values() if type(v).__name__ == "Run")
    fig = fns["head_forms"].fn(run, Selection())
    assert "No training frames" in str(fig.to_json())  # this model ships none: said, not raised
