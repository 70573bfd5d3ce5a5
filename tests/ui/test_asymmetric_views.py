"""Every view draws for a Marian model whose encoder and decoder differ (3 encoder layers of 2 heads,
1 decoder layer of 8 heads, other feed-forward widths), and shows the head it names.

Each registered view is drawn for every attention kind at its own last layer and last head; the
attribution, the patching scan and the controls' choices follow each side's shape.
"""
from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")  # builds the tiny random Marian folder (a development requirement)

from model.families import load_checkpoint
from model.families.catalog import summarize  # noqa: E402
from model.analysis.contrast import attribute_contrast  # noqa: E402
from model.engine.decoding import DecodeOptions, translate  # noqa: E402
from model.engine.names import ATTN_KINDS, CROSS, ENC_SELF  # noqa: E402
from model.analysis.patching import PatchSetup, head_scan  # noqa: E402
from tests.model.test_marian import build_marian  # noqa: E402
from ui.present import head_choices  # noqa: E402
from ui.state import ModelShape, Run, Selection  # noqa: E402
from ui.present.views import REGISTRY, Env  # noqa: E402
from viz.common import layer_head  # noqa: E402

DE = "Zwei Hunde spielen im Schnee!"


@pytest.fixture(scope="module")
def lm(tmp_path_factory):
    torch.set_num_threads(1)
    folder = build_marian(tmp_path_factory.mktemp("asym") / "opus-mt-de-en", d_model=32, layers=3, heads=2, ffn=64,
                          dec_layers=1, dec_heads=8, dec_ffn=40, eos_bias=1.5)
    return load_checkpoint(folder)


@pytest.fixture(scope="module")
def run(lm):
    return Run.of(lm, "opus-mt-de-en", translate(lm, DE, DecodeOptions(beam=2, max_len=8)))


def test_the_run_holds_each_sides_heads(lm, run):
    assert (run.tr.attention(ENC_SELF).shape[:2]) == (3, 2)
    assert (run.tr.attention(CROSS).shape[:2]) == (1, 8)
    shape = ModelShape.of(lm)
    assert (shape.heads(ENC_SELF), shape.heads(CROSS), shape.max_heads, shape.layers(ENC_SELF)) == (2, 8, 8, 3)
    # a selection carried over from a kind with more heads is fitted to this kind's
    assert Selection(kind=ENC_SELF, layer=2, head=7).fit(shape).head == 1
    assert Selection(kind=CROSS, layer=2, head=7).fit(shape) == Selection(kind=CROSS, layer=0, head=7)
    labels = head_choices(lm)
    assert len(labels) == 3 * 2 + 1 * 8 + 1 * 8
    s = summarize(lm)
    assert s.heads_label == "encoder 2, decoder 8" and s.ff_label == "encoder 64, decoder 40"


@pytest.mark.parametrize("name", sorted(n for n, s in REGISTRY.items() if s.draw is not None))
def test_every_view_draws_every_kinds_last_layer_and_head(name, lm, run):
    for kind in ATTN_KINDS:
        layer, head = lm.model.cfg.layers(kind) - 1, lm.model.cfg.heads(kind) - 1
        sel = Selection(kind=kind, layer=layer, head=head, step=1, query=0, view="head")
        out = REGISTRY[name].draw(run, sel, Env(lm))
        figs = out if isinstance(out, (list, tuple)) else [out]
        assert figs and all(f is not None for f in figs)
        title = str(figs[0].layout.title.text) if hasattr(figs[0], "layout") else ""
        if name in ("attention/maps", "computation/inside"):  # the head asked is the head shown
            assert layer_head(layer, head) in title, (name, kind, title)


def test_attribution_and_the_head_scan_follow_each_sides_shape(lm, run):
    c = attribute_contrast(lm.model, run.tr, 0)
    assert len(c.attribution.src_tokens) == len(run.tr.src_ids) and len(c.attribution.alti) == len(run.tr.src_ids)
    src_b = list(run.tr.src_ids)
    src_b[1] = src_b[2]  # one piece changed: the same length, so encoder positions correspond
    out = run.tr.output_ids
    setup = PatchSetup(src_a=tuple(run.tr.src_ids), src_b=tuple(src_b), output=tuple(out), step=0, target=out[0])
    for kind, heads in ((ENC_SELF, 2), (CROSS, 8)):
        scan = head_scan(lm.model, setup, kind)
        assert scan.values.shape == (lm.model.cfg.layers(kind), heads)
