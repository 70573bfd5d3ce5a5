"""Random Unicode through the app's own path: clean_input -> tokenize -> translate -> capture -> figures.

Both directions, on tiny random-weight checkpoints (tests/app_fixtures.make_checkpoint). The
functions called are the UI's (calls.gpu_translate, the decode the Translate
button runs, then ui.views and the attention/step/mask/compare figure builders), in-process, without a server. Invariants are
checked on the arrays (rows sum to 1, masked entries 0, no NaN); figures may use NaN on purpose
for blanked padding rows, so on figures only serialisation and escaping are checked.

Bounded for CI: a fixed number of examples, short decodes.
"""
from __future__ import annotations

import html
import json
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import app
from model.engine.transformer import ATTN_KINDS
from model.engine.vocab import tokenize
from tests.app_fixtures import SENTENCES, all_strings, make_checkpoint
from viz.common import esc
from ui import present
from ui.present import payload
from model.analysis import readouts
from ui import calls
from ui import state
from ui.present import views
from ui.sections import translate as translate_section
from model.engine.names import HeadRef

VIEWS = ("grid", "head", "mean", "scores")
# Tags the figure builders write themselves (hover templates, the chosen top-k bar).
OWN_TAGS = re.compile(r"</?(?:b|br|extra)>")


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    root = tmp_path_factory.mktemp("fuzz-ckpt")
    make_checkpoint(root / "de-en", "de", "en", seed=0)
    make_checkpoint(root / "en-de", "en", "de", seed=1, max_len=24)  # a short one: truncation is common
    key, reg = calls.load_registry(root, "cpu")
    assert sorted(reg.models) == ["de-en", "en-de"]
    return key, reg


WORDS = sorted({w for s in SENTENCES["de"] + SENTENCES["en"] for w in s.rstrip(".").split()})
NASTY = [
    "\u0301", "e\u0301\u0302\u0303", "\u200b", "\u200d", "\u2060", "\ufeff", "\u202e", "\u202d", "\u2066",
    "\u0000", "\x07", "\x1b[31m", "\x7f", "\u0085", "\u2028", "\u2029", "\r\n", "\t", "\x0b",
    "\\ud800", "\\udfff", "\\u0000", "\ud800", "\udfff", "\ud83d",  # surrogates as escaped text and lone ones
    "\U0001F600", "\U0001F468\u200d\U0001F469\u200d\U0001F467", "\U0001F1E9\U0001F1EA", "\ufffd", "\U0010FFFF",
    "مرحبا بالعالم", "שלום", "\u05d0\u05b0", "漢字", "ｆｕｌｌ", "Ⅻ", "ß", "İ", "ﬁ",
    "<script>alert(1)</script>", "<img src=x onerror=alert(1)>", "</b><i>", "&amp;", "&lt;", "%{x}", "{{7*7}}",
    '"', "'", "`", "\\", "<pad>", "<unk>", "<bos>", "<eos>", "-" * 40, "." * 30,
]
pieces = st.one_of(st.sampled_from(NASTY), st.sampled_from(WORDS), st.text(max_size=6),
                   st.integers(0xD800, 0xDFFF).map(chr))  # lone surrogates (valid JSON "\ud800")
texts = st.one_of(
    st.text(max_size=80),
    st.lists(pieces, max_size=25).map(" ".join),
    st.lists(pieces, max_size=25).map("".join),
    st.tuples(st.sampled_from(WORDS + NASTY), st.integers(2000, 10_000)).map(  # long, up to 10k characters
        lambda p: ((p[0] + " ") * (p[1] // (len(p[0]) + 1) + 1))[: p[1]]),
)


# --------------------------------------------------------------------------- checks

def check_attention(trace, name: str):
    """Every captured pattern: no NaN, masked entries 0, visible rows sum to 1."""
    for hook in trace.names():
        if not hook.endswith("hook_pattern"):
            continue
        for p, m in zip(trace.calls(hook), trace.calls(hook.replace("hook_pattern", "hook_mask"))):
            p = p.float().numpy()
            m = np.broadcast_to(m.numpy(), p.shape)
            assert not np.isnan(p).any(), (name, hook)
            assert (p[~m] == 0).all(), (name, hook)
            visible = m.any(-1)
            np.testing.assert_allclose(p.sum(-1)[visible], 1.0, atol=1e-5, err_msg=f"{name} {hook}")


def check_figure(fig, what: str):
    """Serialises to valid UTF-8 JSON (as gr.Plot does) and shows user text only escaped."""
    text = fig.to_json()
    text.encode("utf-8")  # strict: a lone surrogate would raise
    spec = json.loads(text)
    for s in all_strings(spec):
        assert "<" not in OWN_TAGS.sub("", s), (what, s)  # no raw tag from a token
    layout = spec.get("layout", {})
    for key, axis in layout.items():
        if key.startswith(("xaxis", "yaxis")) and isinstance(axis, dict) and "ticktext" in axis:
            for label in axis["ticktext"]:
                label = re.sub(r"^<b>(.*)</b>$", r"\1", str(label))
                assert esc(html.unescape(label)) == label, (what, key, label)  # escaped exactly once


def check_values(values: dict, what: str):
    for name, v in values.items():
        if hasattr(v, "to_json") and hasattr(v, "layout"):
            check_figure(v, f"{what}:{name}")
        elif isinstance(v, (str, list)):
            json.dumps(v, ensure_ascii=False).encode("utf-8")


# --------------------------------------------------------------------------- the test

@settings(max_examples=16, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(text=texts, name=st.sampled_from(["de-en", "en-de"]), beam=st.sampled_from([1, 1, 2]),
       pad=st.sampled_from([0, 0, 30]), compare=st.booleans(), data=st.data())
def test_random_unicode_through_the_app_views(registry, text, name, beam, pad, compare, data):
    key, reg = registry
    lm = reg.models[name]
    cfg = lm.model.cfg

    # the UI handler's path: cap, blank check, decode
    text_c, notices = present.clean_input(text)
    assert len(text_c) <= present.MAX_INPUT_CHARS
    assert bool(notices) == (len(text) > present.MAX_INPUT_CHARS)
    text_c.encode("utf-8")  # what is kept is valid UTF-8 (lone surrogates dropped)
    if present.is_blank(text_c):
        assert tokenize(text_c, lm.src_lang) == []
        return
    opts = translate_section.opts_from("beam" if beam > 1 else "greedy", beam, 6, pad)
    tr = calls.gpu_translate(key, name, text_c, opts)
    assert tr.output_tokens == [lm.tgt_vocab.itos[i] for i in tr.output_ids]

    # output: valid UTF-8 everywhere, shapes within the model's limits
    assert len(tr.src_tokens) <= max(cfg.max_len, opts.pad_src_to)
    assert 1 <= len(tr.output_tokens) <= opts.max_len
    tr.text.encode("utf-8")
    body = json.dumps(payload.to_json(tr, notices, name), ensure_ascii=False, allow_nan=False)
    body.encode("utf-8")

    # arrays
    check_attention(tr.trace, name)
    for kind in ATTN_KINDS:
        a = tr.attention(kind)
        q, k = tr.axes(kind)
        assert a.shape[2:] == (len(q), len(k)) and not np.isnan(a).any()
    for s in tr.steps:
        for rows in (s.cross_attn, s.self_attn):
            assert not np.isnan(rows).any()
            np.testing.assert_allclose(rows.sum(-1), 1.0, atol=1e-5)
        assert 0.0 <= s.prob <= 1.0 and np.isfinite(s.topk_probs).all()

    # every figure the UI draws for this run
    run = state.Run(name, tr, present.run_notices(tr, notices, lm))
    layer = data.draw(st.integers(0, 5), label="layer")
    head = data.draw(st.integers(0, 5), label="head")
    # a kind as a control or a link sends it becomes the engine's Kind where it enters (Selection.of)
    kind_in = state.Selection.of(data.draw(st.sampled_from(ATTN_KINDS + ("bogus", "cross", None)), label="kind")).kind
    check_figure(views.attention_figure(run, HeadRef(kind_in, layer, head), data.draw(st.sampled_from(VIEWS), label="view"),
                                        "words", lm), "attention")
    if tr.steps:
        check_figure(views.watch_heads(run), "watch heads")
    for kind in ATTN_KINDS:
        for view in VIEWS:
            check_figure(views.attention_figure(run, HeadRef(kind, layer, head), view), f"{kind}/{view}")
    # the analysis tabs (rollout, alignment lines, beam tree), where this version of the app has them
    if True:
        check_figure(views.rollout_view_figure(run, data.draw(st.sampled_from(["all", "0", "1", "9", None]),
                                                            label="rollout layer")), "rollout")
    if True:
        for mode in ("head", "layer", "mean", "rollout"):
            check_figure(views.alignment_view_figure(run, mode, layer, head), f"alignment {mode}")
    if tr.beam is not None:
        view_ = state.BeamView(name, tr, readouts.beam_tree_data(lm, tr))
        check_figure(views.beam_view_figure(view_), "beam tree")
    for t in range(len(tr.steps)):
        md, prefix, *figs = views.step_figures(run, t)
        json.dumps([md, prefix], ensure_ascii=False).encode("utf-8")
        for i, f in enumerate(figs):
            check_figure(f, f"step {t} fig {i}")

    if compare:  # the Masks & compare tab: baseline, modified run, teacher-forced modified trace
        iv = present.make_interventions(data.draw(st.booleans(), "padding"), data.draw(st.booleans(), "causal"),
                                        data.draw(st.booleans(), "positional"),
                                        data.draw(st.lists(st.sampled_from(present.head_choices(lm)), max_size=3),
                                                  "heads"),
                                        data.draw(st.lists(st.integers(0, len(tr.src_tokens) - 1), max_size=3),
                                                  "src"))
        base, mod, mod_on_base = calls.gpu_compare(key, name, text_c, opts, iv)
        for t, what in ((base.trace, "baseline"), (mod.trace, "modified"), (mod_on_base, "modified on baseline")):
            check_attention(t, what)
        cmp = state.CompareRun(name, base, mod, mod_on_base, iv)
        for kind in ATTN_KINDS:
            check_figure(views.compare_maps_figure(cmp, HeadRef(kind, layer, head)), f"compare {kind}")
        check_figure(views.masks_figure(reg, name, mod.src_tokens, mod.output_tokens, iv, "masks"), "masks")
