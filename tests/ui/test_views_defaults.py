"""What the views open on and say by default: the query Inside one head starts from, why a mask panel
repeats the scores, why the logit lens's first layer names its input."""
from __future__ import annotations

import pytest

from model.engine.decoding import DecodeOptions, translate
from model.engine.transformer import CROSS, DEC_SELF, ENC_SELF
from ui.present import inside, views
from ui.state import Run
from model.engine.names import HeadRef


@pytest.fixture
def run(tiny_lm):
    return Run.of(tiny_lm, "tiny", translate(tiny_lm, "haus katze hund", DecodeOptions(max_len=6, trace=True)))


def test_inside_one_head_opens_on_a_query_with_masked_keys(run, tiny_lm):
    fig = inside.head_figure(run, tiny_lm, HeadRef(DEC_SELF, 0, 0), None)
    assert "query 0:" in fig.layout.title.text
    assert inside.default_query(DEC_SELF, 5) == 0 and inside.default_query(CROSS, 5) == 0


def test_an_unmasked_mask_panel_says_why_it_repeats_the_scores(run):
    cross = views.scores_figure(run, HeadRef(CROSS, 0, 0))
    names = [a.text for a in cross.layout.annotations]
    assert any("masks only padding" in n for n in names)
    assert any("masks only padding" in n for n in (a.text for a in views.scores_figure(run, HeadRef(ENC_SELF, 0, 0)).layout.annotations))
    causal = [a.text for a in views.scores_figure(run, HeadRef(DEC_SELF, 0, 0)).layout.annotations]
    assert not any("masks only padding" in n for n in causal) and any("−∞" in n for n in causal)


def test_logit_lens_says_why_layer_0_names_its_input(run, tiny_lm):
    fig = inside.lens_figure(run, tiny_lm)
    assert tiny_lm.model.cfg.tie_embeddings and "tied" in fig.layout.title.subtitle.text


def test_changing_direction_says_translate_is_needed(tiny_lm):
    from model.families.ours import Registry
    from ui.present import direction_hint
    reg = Registry({"de-en": tiny_lm, "en-de": tiny_lm})
    hint = direction_hint("de-en", "en-de", reg)
    assert "Translate" in hint and "still shows" in hint
    assert direction_hint("de-en", "de-en", reg) == "" and direction_hint(None, "en-de", reg) == ""
