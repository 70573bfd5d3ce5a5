"""The static page against the engine, in Chromium: the tokenizer's pieces, the greedy tokens and every
attention pattern, computed in the browser (ONNX Runtime Web, WASM) and in Python in the same test."""
from __future__ import annotations

import functools

import numpy as np
import pytest

from model.engine.config import Interventions
from model.engine.decoding import DecodeOptions, translate
from model.engine.names import CROSS, DEC_SELF, ENC_SELF
from model.families.ours import find_checkpoints, load
from tests.browser_fixtures import check_chromium, chromium, new_page
from tests.web.test_web_fixtures import HARD_STRINGS, ROOT, guard, lines, open_site, site, static_server

DIRECTIONS = tuple(p.name for p in find_checkpoints(ROOT / "checkpoints"))  # every shipped direction
N_GREEDY = 20        # validation sentences per direction here; bench/web_parity.py measures 500
N_ATTN = 5           # sentences per direction whose every pattern is compared
ATTN_TOL = 1e-4      # max |difference| of any attention weight (fp32 both sides, the same fp16-stored weights)
KINDS = {"enc": ENC_SELF, "self": DEC_SELF, "cross": CROSS}
GREEDY_OPTS = DecodeOptions(beam=1, record=False, trace=False)  # python -m model.translate --beam 1


@functools.cache
def model(name: str):
    return load(ROOT / "checkpoints" / name)


@pytest.fixture(scope="module")
def page():
    check_chromium()
    folder = site()
    with static_server(folder) as base, chromium() as browser:
        pg = new_page(browser)
        foreign = guard(pg, base)
        open_site(pg, base + "/index.html")
        yield pg
        assert foreign == [], f"the page asked other hosts: {foreign[:3]}"


def in_browser(page, fn: str, name: str, items: list):
    """window.explorer[fn](name, item) for every item, in one round trip."""
    return page.evaluate("async ([fn, name, items]) => { const out = [];"
                         " for (const x of items) out.push(await window.explorer[fn](name, x)); return out; }",
                         [fn, name, items])


@pytest.mark.parametrize("name", DIRECTIONS)
def test_tokenizer_pieces_match_the_engine(page, name):
    """Every validation and test sentence of the source language, and hard strings: the same pieces as the
    engine's spaCy words + SentencePiece, and as SentencePiece alone on the raw text."""
    lm = model(name)
    texts = lines("val", lm.src_lang) + lines("test_2016_flickr", lm.src_lang) + HARD_STRINGS
    want = [lm.src_vocab.tokens(t, lm.src_lang) for t in texts]
    got = in_browser(page, "pieces", name, texts)
    diff = [(t, g, w) for t, g, w in zip(texts, got, want) if g != w]
    assert not diff, f"{len(diff)} of {len(texts)} differ, first: {diff[0]}"
    raw = HARD_STRINGS + texts[:200]
    got = in_browser(page, "encodePieces", name, raw)
    want = [lm.src_vocab.sp.encode(t, out_type=str) for t in raw]
    assert got == want


@pytest.mark.parametrize("name", DIRECTIONS)
def test_greedy_tokens_match_the_engine(page, name):
    """The page's own pipeline (its tokenizer, its decode loop) gives the engine's greedy tokens on at
    least 98 % of validation sentences; every one that differs is listed."""
    lm = model(name)
    texts = lines("val", lm.src_lang)[:N_GREEDY]
    got = page.evaluate("async ([name, texts]) => { const out = []; for (const t of texts) {"
                        " const r = await window.explorer.translate(name, t); out.push(r.outIds); } return out; }",
                        [name, texts])
    want = [translate(lm, t, GREEDY_OPTS).output_ids for t in texts]
    differ = [(t, g, w) for t, g, w in zip(texts, got, want) if g != w]
    assert len(differ) <= 0.02 * len(texts), f"{len(differ)} of {len(texts)} differ: {differ[:3]}"


@pytest.mark.parametrize("name", DIRECTIONS)
def test_every_attention_pattern_matches_the_engine(page, name):
    """Given the engine's source ids, every head of every kind (the final step's full matrices) equals the
    engine's captured pattern within ATTN_TOL, for the default switches and with the look-ahead mask off."""
    lm = model(name)
    worst = 0.0
    for text in lines("val", lm.src_lang)[100:100 + N_ATTN]:
        for causal in (True, False):
            tr = translate(lm, text, DecodeOptions(beam=1), Interventions(causal_mask=causal))
            got = page.evaluate("([n, ids, c]) => window.explorer.greedyIds(n, ids, {causal: c})",
                                [name, tr.src_ids, causal])
            assert got["ids"] == tr.output_ids, text
            for short, kind in KINDS.items():
                worst = max(worst, float(np.abs(np.array(got["patterns"][short]) - tr.attention(kind)).max()))
    print(f"{name}: attention max |diff| {worst:.2e}")
    assert worst < ATTN_TOL
