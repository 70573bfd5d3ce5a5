"""Analysis › Two sentences follows Units like every other map: in words, each sentence's rows and columns are
the words of the shipped subword de-en model's pieces (no ▁ piece left), in tokens the pieces themselves."""
from __future__ import annotations

import html
from pathlib import Path

import numpy as np
import pytest

from model.engine.decoding import translate
from model.engine.names import HeadRef
from model.engine.transformer import CROSS, ENC_SELF
from model.families import load_checkpoint
from ui.present.views import pair_view_figure
from ui.state import PairRun, Run

CKPT = Path(__file__).resolve().parents[2] / "checkpoints" / "de-en"
A, B = "Der Mann sieht die Frau mit dem Fernglas.", "Die Frau sieht den Mann mit dem Fernglas."


@pytest.fixture(scope="module")
def pair():
    lm = load_checkpoint(CKPT)
    assert lm.src_vocab.kind != "word"  # a subword model: words and pieces differ
    return lm, PairRun("de-en", translate(lm, A), translate(lm, B))


def _keys(fig, i: int) -> list[str]:
    axis = fig.layout["xaxis" if i == 0 else f"xaxis{i + 1}"]
    return [html.unescape(t) for t in axis.ticktext]  # labels are escaped for the page


@pytest.mark.parametrize("kind", [CROSS, ENC_SELF])
def test_the_pair_follows_units(pair, kind):
    lm, p = pair
    words, tokens = (pair_view_figure(p, HeadRef(kind, 1, 2), units, lm) for units in ("words", "tokens"))
    for i, tr in enumerate((p.a, p.b)):
        run = Run.of(lm, "de-en", tr)
        assert _keys(words, i) == run.src_words  # one column per word of the sentence
        assert not any("▁" in k for k in _keys(words, i)), _keys(words, i)
        assert any("▁" in k for k in _keys(tokens, i))
        # the weights are the words' own: each word's keys summed, so each row still sums to one
        z = np.asarray(words.data[i].z, float)
        rows = z[~np.isnan(z).all(axis=1)]
        assert np.allclose(np.nansum(rows, axis=1), 1.0, atol=1e-3)
    assert "(in words)" in words.layout.title.text and "(in tokens)" in tokens.layout.title.text
