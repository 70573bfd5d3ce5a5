"""Generation's step box, in-process: a step typed into the slider's box draws that step without writing the
slider back (an answer that rewrote it would overwrite what is typed meanwhile, and the next pending read
would then carry the older value); an emptied box draws nothing; a step past the run is brought inside it."""
from __future__ import annotations

import gradio as gr
import pytest

from tests.app_fixtures import make_checkpoint
from ui.state import Selection

CROSS = "decoder.cross_attn"


@pytest.fixture(scope="module")
def fns(tmp_path_factory):
    import app
    root = tmp_path_factory.mktemp("ck")
    make_checkpoint(root / "de-en", "de", "en", seed=0)
    demo = app.build_app(root, device="cpu", warm=False)
    return {f.api_name: f.fn for f in demo.fns.values() if f.api_name}


def test_a_typed_step_is_drawn_and_the_box_is_left_as_typed(fns):
    values = fns["translate_stream"]("Zwei Hunde spielen im Schnee.", "de-en", "greedy", 4, 12, Selection.of(CROSS))
    run = next(v for v in values.values() if type(v).__name__ == "Run")
    n = len(run.tr.steps)
    assert n >= 4
    out = fns["step_view"](run, 3)
    assert not isinstance(out[0], gr.Slider)            # the box keeps what was typed
    assert "step 3" in str(out[1]).lower()               # the step's own view
    assert all(not isinstance(v, gr.Slider) for v in fns["step_view"](run, None))  # an emptied box: nothing drawn
    assert fns["step_view"](run, None)[1] != fns["step_view"](run, 0)[1]
    past = fns["step_view"](run, n + 5)[0]               # outside the run: brought inside, and said in the box
    assert isinstance(past, gr.Slider) and past.value == n - 1
