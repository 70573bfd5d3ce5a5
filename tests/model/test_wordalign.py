"""Word alignment: AER and F1, the aligner, symmetrisation, the shipped reference, the head ranking and
its endpoint."""
from __future__ import annotations

import gzip
import itertools
import json
import subprocess
import sys
from contextlib import contextmanager
from fractions import Fraction
from pathlib import Path

import numpy as np
import plotly.graph_objects as go
import pytest

from model.analysis.alignment.heads import (HeadRanking, _Item, heads_path, load_ranking, rank_heads, ranking_for,
                                            save_ranking, sentence_counts, sha256)
from model.analysis.alignment.reference import (Counts, Reference, counts_of, parse_pharaoh, read_pharaoh, score,
                                                score_corpus)
from model.analysis.alignment.wordalign import (align_corpus, build_references, grow_diag_final_and, symmetrise,
                                                transpose)
from model.engine.vocab import tokenize
from model.families import load_checkpoint
from model.families.ours import WEIGHTS, find_checkpoints
from viz.align_rank import aer_grid

from tests.app_fixtures import SENTENCES, launch, make_checkpoint

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "checkpoints" / "alignments"
DATA = ROOT / "checkpoints" / "multi30k"  # the validation texts ship with the app


# --------------------------------------------------------------------------- metrics

def test_aer_precision_recall_f1_on_a_hand_example():
    # sure S = {0-0, 1-1, 2-3}; possible P = S + {2-2, 3-3}; predicted A = {0-0, 1-1, 2-2, 3-2}
    ref = parse_pharaoh("0-0 1-1 2-3 2?2 3?3")
    assert ref.sure == {(0, 0), (1, 1), (2, 3)}
    assert ref.possible == ref.sure | {(2, 2), (3, 3)}
    c = score([(0, 0), (1, 1), (2, 2), (3, 2)], ref)
    # by hand: |A| = 4, |S| = 3, |A∩S| = 2 (0-0, 1-1), |A∩P| = 3 (and 2-2)
    assert (c.predicted, c.sure, c.hit_sure, c.hit_possible) == (4, 3, 2, 3)
    assert c.precision == pytest.approx(3 / 4)
    assert c.recall == pytest.approx(2 / 3)
    assert c.aer == pytest.approx(1 - Fraction(2 + 3, 4 + 3))           # 2/7
    assert c.f1 == pytest.approx(float(2 * Fraction(3, 4) * Fraction(2, 3) / (Fraction(3, 4) + Fraction(2, 3))))
    # perfect on the sure links, nothing else: AER 0 although recall of P is not complete
    assert score(ref.sure, ref).aer == 0.0
    assert score([], ref).aer == 1.0


def test_corpus_scores_sum_counts_before_dividing():
    a = parse_pharaoh("0-0 1-1")
    b = parse_pharaoh("0-0 1-1 2-2 3-3")
    total = score_corpus([[(0, 0), (1, 0)], [(0, 0), (1, 1), (2, 2), (3, 3)]], [a, b])
    assert total == Counts(6, 6, 5, 5)
    assert total.aer == pytest.approx(1 - 10 / 12)   # not the mean of the two sentences' AERs (0.5 and 0)


def test_pharaoh_lines_round_trip_and_transpose():
    from model.analysis.alignment.reference import format_pharaoh
    ref = parse_pharaoh("2-0 0-1 1?1 3?2")
    assert parse_pharaoh(format_pharaoh(ref)) == ref
    assert transpose(transpose(ref)) == ref
    assert transpose(ref).sure == {(0, 2), (1, 0)}
    with pytest.raises(ValueError):
        parse_pharaoh("0:1")


# --------------------------------------------------------------------------- aligner

def _swapped_corpus():
    """Determiner, adjective, noun, verb -> determiner, noun, adjective, verb: the diagonal prior alone
    would link the adjective to the noun; co-occurrence has to win."""
    adjs = [("red", "rouge"), ("big", "grand"), ("old", "vieux"), ("blue", "bleu")]
    nouns = [("house", "maison"), ("car", "voiture"), ("dog", "chien"), ("boat", "bateau")]
    verbs = [("sleeps", "dort"), ("stands", "reste"), ("waits", "attend")]
    src, tgt = [], []
    for (a, a2), (n, n2), (v, v2) in itertools.product(adjs, nouns, verbs):
        src.append(["the", a, n, v])
        tgt.append(["le", n2, a2, v2])
    return src, tgt


def test_the_aligner_learns_an_obvious_toy_corpus():
    src, tgt = _swapped_corpus()
    refs = align_corpus(src, tgt)
    gold = {(0, 0), (1, 2), (2, 1), (3, 3)}
    assert all(r.sure == gold and r.possible == gold for r in refs)
    # and it is the words, not the positions: the reverse corpus is aligned as the transpose
    back = align_corpus(tgt, src)
    assert all(r == transpose(g) for r, g in zip(back, refs))


def test_grow_diag_final_and_on_a_hand_example():
    # forward (each target word's source word): t0->0 t1->1 t2->1 t3->3 t4->0
    # backward (each source word's target word): s0->0 s1->1 s2->1 s3->NULL
    fwd = {(0, 0), (1, 1), (1, 2), (3, 3), (0, 4)}
    bwd = {(0, 0), (1, 1), (2, 1)}
    # intersection {0-0, 1-1}; grow-diag adds 1-2 (t2 unaligned) and 2-1 (s2 unaligned), both next to 1-1;
    # final-and adds 3-3 (both words unaligned, not next to anything) but not 0-4 (s0 already aligned)
    expected = {(0, 0), (1, 1), (1, 2), (2, 1), (3, 3)}
    assert grow_diag_final_and(fwd, bwd, 4, 5) == expected
    ref = symmetrise([0, 1, 1, 3, 0], [0, 1, 1, -1], 4, 5)
    assert ref.sure == {(0, 0), (1, 1)} and ref.possible == expected
    # a diagonal neighbour joins; a union link whose two words are both aligned does not
    assert grow_diag_final_and({(0, 0), (1, 1)}, {(0, 0)}, 2, 2) == {(0, 0), (1, 1)}
    assert grow_diag_final_and({(0, 0), (1, 1), (0, 1)}, {(0, 0), (1, 1)}, 2, 2) == {(0, 0), (1, 1)}


def _write_corpus(folder: Path, splits: dict[str, dict[str, list[str]]]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for split, langs in splits.items():
        for lang, lines in langs.items():
            with gzip.open(folder / f"{split}.{lang}.gz", "wt", encoding="utf-8") as f:
                f.write("\n".join(lines) + "\n")


def test_the_command_writes_both_directions_deterministically(tmp_path):
    data = tmp_path / "data"
    _write_corpus(data, {"train": {"de": SENTENCES["de"] * 3, "en": SENTENCES["en"] * 3},
                         "val": {"de": SENTENCES["de"][:3], "en": SENTENCES["en"][:3]}})
    out = tmp_path / "a"
    cmd = [sys.executable, "-m", "model.wordalign", "reference", "--data", str(data), "--out", str(out),
           "--pairs", "de-en", "--aligner", "ibm2"]
    subprocess.run(cmd, check=True, cwd=ROOT, capture_output=True)
    again = build_references(data, tmp_path / "b", [("de", "en")], log=lambda _m: None)
    for name in ("de-en.val.align", "en-de.val.align"):
        assert (out / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    de_en, en_de = read_pharaoh(out / "de-en.val.align"), read_pharaoh(out / "en-de.val.align")
    assert len(de_en) == 3 and [transpose(r) for r in de_en] == en_de
    assert [p.name for p in again] == ["de-en.val.align", "en-de.val.align"]


# --------------------------------------------------------------------------- the shipped reference

def _val(lang: str) -> list[str]:
    with gzip.open(DATA / f"val.{lang}.gz", "rt", encoding="utf-8") as f:
        return f.read().splitlines()


@pytest.mark.parametrize("path", sorted(SHIPPED.glob("*.val.align")), ids=lambda p: p.name)
def test_the_shipped_reference_covers_the_validation_set(path):
    src, tgt = path.name.split(".")[0].split("-")
    refs, src_lines, tgt_lines = read_pharaoh(path), _val(src), _val(tgt)
    assert len(refs) == len(src_lines) == len(tgt_lines) == 1014
    assert path.read_text(encoding="utf-8").count("\n") == len(src_lines)
    for ref, s, t in zip(refs, src_lines, tgt_lines):
        assert ref.sure <= ref.possible
        assert ref.in_range(len(tokenize(s, src)), len(tokenize(t, tgt)))
    assert sum(len(r.sure) for r in refs) > 5 * len(refs)   # not an empty or near-empty reference
    assert read_pharaoh(SHIPPED / f"{tgt}-{src}.val.align") == [transpose(r) for r in refs]


def test_every_shipped_direction_has_a_reference_and_a_current_ranking():
    dirs = find_checkpoints(ROOT / "checkpoints")
    assert dirs
    for d in dirs:
        cfg = json.loads((d / "config.json").read_text(encoding="utf-8"))
        ref = SHIPPED / f"{cfg['src_lang']}-{cfg['tgt_lang']}.val.align"
        assert ref.is_file(), ref
        ranking = load_ranking(heads_path(SHIPPED, f"{cfg['src_lang']}-{cfg['tgt_lang']}"))
        assert ranking is not None
        assert ranking.reference_sha256 == sha256(ref) and ranking.weights_sha256 == sha256(d / WEIGHTS)


def test_the_reference_is_close_to_the_hand_alignment():
    """Ten de-en val sentences aligned by hand: the statistical reference's possible links score against them."""
    gold = read_pharaoh(SHIPPED / "de-en.val10.hand.align")
    auto = read_pharaoh(SHIPPED / "de-en.val.align")[:len(gold)]
    assert score_corpus([r.possible for r in auto], gold).aer < 0.3
    assert score_corpus([r.sure for r in auto], gold).precision > 0.85


# --------------------------------------------------------------------------- attention -> links

def test_pooled_argmax_and_the_shifted_rows_on_a_hand_example():
    # source pieces <bos> a1 a2 b <eos> (words a = [1, 2], b = [3]); output pieces x1 x2 y <eos>
    # (words x = [0, 1], y = [2]); reference: x <- b, y <- a (crossing)
    ref = Reference.of([(1, 0), (0, 1)])
    it = _Item(0, [0] * 5, [0] * 4, [[1, 2], [3]], [[0, 1], [2]], ref)
    cross = np.zeros((1, 2, 4, 5))
    # head 0 reads right on the rows that predict each word: x's two rows go to b; y's row splits 0.3 + 0.3 over
    # a's pieces and 0.4 on b, so a wins only because a word's key weight is the sum of its pieces
    cross[0, 0, 0, 3] = cross[0, 0, 1, 3] = 1.0
    cross[0, 0, 2, [1, 2, 3]] = [0.3, 0.3, 0.4]
    cross[0, 0, 3, 4] = 1.0
    # head 1 is head 0 one row later: right on the rows where each word is the decoder input
    cross[0, 1, 1:] = cross[0, 0, :3]
    cross[0, 1, 0, 0] = 1.0
    enc = np.broadcast_to(np.eye(5), (1, 2, 5, 5))
    counts = sentence_counts(cross, enc, it)        # (variants, sources, 4): sources = 2 heads, 1 layer, all, rollout
    out_h0, shift_h1 = counts_of(counts[0, 0]), counts_of(counts[1, 1])
    assert out_h0 == Counts(2, 2, 2, 2) and out_h0.aer == 0.0
    assert shift_h1 == Counts(2, 2, 2, 2)
    # head 1 read on the predicting rows: x = mean(rows 0, 1) -> <bos> 0.5 (left out), b 0.5 -> b (right);
    # y = row 2 -> b (wrong)
    assert counts_of(counts[0, 1]) == Counts(2, 2, 1, 1)


def _tiny_lm(tmp_path):
    return load_checkpoint(make_checkpoint(tmp_path / "de-en", "de", "en", seed=3))


def test_the_ranking_is_deterministic_and_ordered(tmp_path):
    lm = _tiny_lm(tmp_path)
    src, tgt = SENTENCES["de"], SENTENCES["en"]
    refs = align_corpus([tokenize(s, "de") for s in src], [tokenize(t, "en") for t in tgt])
    a = rank_heads(lm, src, tgt, refs, batch_size=2)
    b = rank_heads(lm, src, tgt, refs, batch_size=64)
    assert a.entries == b.entries
    assert a.sentences == len(src) and a.skipped == 0
    L, H = lm.model.cfg.n_decoder_layers, lm.model.cfg.n_heads
    assert len(a.of("head")) == L * H and len(a.of("layer")) == L and len(a.of("all")) == len(a.of("rollout")) == 1
    keys = [e.key() for e in a.entries]
    assert keys == sorted(keys)
    for e in a.entries:
        assert e.aer == min(e.output.aer, e.shift.aer)
    # the JSON form reads back to the same ranking
    path = tmp_path / "x.heads.json"
    save_ranking(path, a)
    assert load_ranking(path) == a


def test_a_current_shipped_ranking_is_read_and_a_stale_one_recomputed(tmp_path):
    lm = _tiny_lm(tmp_path)
    align, data = tmp_path / "alignments", tmp_path / "data"
    _write_corpus(data, {"val": {"de": SENTENCES["de"], "en": SENTENCES["en"]}})
    refs = align_corpus([tokenize(s, "de") for s in SENTENCES["de"]], [tokenize(t, "en") for t in SENTENCES["en"]])
    align.mkdir()
    from model.analysis.alignment.reference import write_pharaoh
    write_pharaoh(align / "de-en.val.align", refs)
    fresh = ranking_for(lm, align, [data])
    marked = HeadRanking(**{**fresh.__dict__, "seconds": 12345.0})
    save_ranking(heads_path(align, "de-en"), marked)
    assert ranking_for(lm, align, [data]).seconds == 12345.0          # read from the file
    (align / "de-en.val.align").write_text("0-0\n" * len(refs), encoding="utf-8")
    assert ranking_for(lm, align, [data]).seconds != 12345.0          # the reference changed: computed again
    with pytest.raises(ValueError, match="validation texts"):
        ranking_for(lm, align, [tmp_path / "nowhere"])


def test_the_aer_grid_figure_opens_heads_only():
    fig = aer_grid(np.array([[0.2, 0.5], [0.9, 0.1]]), [0.3, 0.4], np.array([[True, False, False], [False, True, True]]))
    go.Figure(fig.to_dict())  # validates every property
    trace = fig.data[0]
    assert trace.customdata[1][1] == [1, 1] and trace.customdata[0][2] == [0, None]
    assert trace.text[0][0] == "0.20ˢ" and trace.text[1][2] == "0.40ˢ"
    with pytest.raises(ValueError):
        aer_grid(np.zeros((2, 2)), [0.1], np.zeros((2, 3), bool))


# --------------------------------------------------------------------------- the endpoint

@contextmanager
def aligned_app(tmp_path_factory, **checkpoint):
    """The app on a tiny de-en checkpoint with a reference alignment of the validation sentences (made by our
    aligner) and those sentences as Multi30k's val files; yields (demo, url, root)."""
    from model.analysis.alignment.reference import write_pharaoh
    from ui import calls
    root = tmp_path_factory.mktemp("align-ckpts")
    make_checkpoint(root / "de-en", "de", "en", seed=0, **checkpoint)
    refs = align_corpus([tokenize(s, "de") for s in SENTENCES["de"]], [tokenize(t, "en") for t in SENTENCES["en"]])
    (root / "alignments").mkdir()
    write_pharaoh(root / "alignments" / "de-en.val.align", refs)
    _write_corpus(root / "data", {"val": {"de": SENTENCES["de"], "en": SENTENCES["en"]}})
    saved = list(calls.DATA_DIRS)
    calls.DATA_DIRS[:] = [root / "data"]
    demo, url = launch(root)
    try:
        yield demo, url, root
    finally:
        demo.close()
        calls.DATA_DIRS[:] = saved


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with aligned_app(tmp_path_factory) as served:
        yield served


def test_alignment_heads_endpoint(client, server):
    root = server[2]
    out = client.predict("de-en", api_name="/alignment_heads")
    lm = load_checkpoint(root / "de-en")
    want = rank_heads(lm, SENTENCES["de"], SENTENCES["en"], read_pharaoh(root / "alignments" / "de-en.val.align"))
    assert [e["label"] for e in out["ranking"]] == [e.label for e in want.entries]
    assert [e["aer"] for e in out["ranking"]] == pytest.approx([e.aer for e in want.entries])
    assert [e["rank"] for e in out["ranking"]] == list(range(1, len(want.entries) + 1))
    assert out["model"] == "de-en" and out["sentences"] == len(SENTENCES["de"])
    assert {"output", "shift", "best", "precision"} <= set(out["ranking"][0]) | set(out["ranking"][0]["output"])
    with pytest.raises(Exception, match="Unknown direction"):
        client.predict("xx-yy", api_name="/alignment_heads")


def test_a_sentence_that_cannot_be_ranked_leaves_the_whole_ranking_on_screen(server):
    from ui import calls
    from ui.align_heads import show
    demo = server[0]
    key = next(k for k, r in calls.REGISTRIES.items() if r is demo.registry)
    md, fig, rows = show(key, demo.registry, None, "de-en", "")
    for typed in ("9999", "seven"):
        bad_md, bad_fig, bad_rows = show(key, demo.registry, None, "de-en", typed)
        assert bad_md.startswith("⚠️") and "whole set" in bad_md and md in bad_md
        assert bad_rows == rows and bad_fig.to_dict() == fig.to_dict()  # exact: one ranking, drawn by one code
    one_md, _, one_rows = show(key, demo.registry, None, "de-en", "1")
    assert "validation sentence 1" in one_md and one_rows != rows
