"""The eflomal reference, per-sentence head rankings (model and endpoint), and the reference links the
Alignment view draws over a teacher-forced validation sentence."""
from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from model.analysis.alignment import eflomal_ref, wordalign
from model.analysis.alignment.heads import rank_heads
from model.analysis.alignment.reference import read_pharaoh, score_corpus, write_pharaoh
from model.analysis.alignment.sentence import find_val_pair, sentence_ranking, val_reference
from model.analysis.alignment.wordalign import align_corpus, transpose
from model.analysis.computation import force
from model.engine.vocab import tokenize
from model.families import load_checkpoint
from ui.present import views
from ui.present.align_overlay import NOT_FORCED, overlay_of
from ui.state import Run, RunInputs
from viz.alignment import REF_POSSIBLE, REF_SURE

from tests.app_fixtures import SENTENCES, make_checkpoint
from tests.model.test_wordalign import aligned_app

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "checkpoints" / "alignments"


def _write_corpus(folder: Path, splits: dict[str, dict[str, list[str]]]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for split, langs in splits.items():
        for lang, lines in langs.items():
            with gzip.open(folder / f"{split}.{lang}.gz", "wt", encoding="utf-8") as f:
                f.write("\n".join(lines) + "\n")


# --------------------------------------------------------------------------- eflomal

def test_eflomal_links_are_read_as_source_target_and_symmetrised(tmp_path, monkeypatch):
    (tmp_path / "f").write_text("0-0 1-2\n\n", encoding="utf-8")
    assert eflomal_ref.read_links(tmp_path / "f", 3) == [{(0, 0), (1, 2)}, set(), set()]
    # forward: target word -> source word; reverse: source word -> target word (both as (source, target))
    monkeypatch.setattr(eflomal_ref, "directional_links",
                        lambda s, t: ([{(0, 0), (1, 1), (1, 2)}], [{(0, 0), (1, 1), (2, 2)}]))
    (ref,) = wordalign.align_corpus_eflomal([["a", "b", "c"]], [["x", "y", "z"]])
    assert ref.sure == {(0, 0), (1, 1)}
    assert ref.possible == wordalign.grow_diag_final_and({(0, 0), (1, 1), (1, 2)}, {(0, 0), (1, 1), (2, 2)}, 3, 3)


def test_without_eflomal_the_command_falls_back_to_ibm2(monkeypatch):
    monkeypatch.setattr(eflomal_ref, "available", lambda: False)
    assert wordalign.default_aligner() == "ibm2"
    with pytest.raises(RuntimeError, match="not installed"):
        eflomal_ref.directional_links([["a"]], [["x"]])
    with pytest.raises(ValueError, match="unknown aligner"):
        wordalign.build_references(".", ".", [("de", "en")], aligner="giza")


def test_eflomal_aligns_an_obvious_toy_corpus_through_the_command(tmp_path):
    """Adjective and noun swap between the languages: eflomal's reference must cross the diagonal."""
    pytest.importorskip("eflomal", reason="eflomal (requirements-dev.txt) is not installed")
    nouns = {"dog": "chien", "cat": "chat", "car": "voiture", "house": "maison", "ball": "balle"}
    adjs = {"red": "rouge", "big": "grand", "old": "vieux", "green": "vert"}
    en = [f"the {a} {n}" for a in adjs for n in nouns] * 4
    fr = [f"le {n2} {a2}" for a2 in adjs.values() for n2 in nouns.values()] * 4
    data, out = tmp_path / "data", tmp_path / "out"
    _write_corpus(data, {"train": {"en": en, "fr": fr}, "val": {"en": en[:3], "fr": fr[:3]}})
    subprocess.run([sys.executable, "-m", "model.wordalign", "reference", "--aligner", "eflomal", "--data", str(data),
                    "--out", str(out), "--pairs", "en-fr"], check=True, cwd=ROOT, capture_output=True)
    refs = read_pharaoh(out / "en-fr.val.align")
    assert len(refs) == 3
    for r in refs:   # the red dog -> le chien rouge: 0-0, 1-2, 2-1
        assert r.sure == {(0, 0), (1, 2), (2, 1)}
    assert read_pharaoh(out / "fr-en.val.align") == [transpose(r) for r in refs]


def test_the_shipped_reference_is_near_the_hand_alignments():
    """The shipped (eflomal) reference's possible links against the hand-aligned val sentences."""
    for pair, hand, most in (("de-en", "de-en.val10.hand.align", 0.1), ("en-fr", "en-fr.val5.hand.align", 0.1)):
        gold = read_pharaoh(SHIPPED / hand)
        auto = read_pharaoh(SHIPPED / f"{pair}.val.align")[:len(gold)]
        assert score_corpus([r.possible for r in auto], gold).aer < most, pair


# --------------------------------------------------------------------------- one sentence

def _setup(tmp_path):
    lm = load_checkpoint(make_checkpoint(tmp_path / "de-en", "de", "en", seed=3))
    src, tgt = SENTENCES["de"], SENTENCES["en"]
    refs = align_corpus([tokenize(s, "de") for s in src], [tokenize(t, "en") for t in tgt])
    align, data = tmp_path / "alignments", tmp_path / "data"
    align.mkdir()
    write_pharaoh(align / "de-en.val.align", refs)
    _write_corpus(data, {"val": {"de": src, "en": tgt}})
    return lm, refs, align, data


def test_a_sentence_ranking_is_the_set_ranking_of_that_sentence_alone(tmp_path):
    lm, refs, align, data = _setup(tmp_path)
    for k in range(len(refs)):
        pair = val_reference(align, [data], "de", "en", k)
        assert (pair.source, pair.target, pair.reference) == (SENTENCES["de"][k], SENTENCES["en"][k], refs[k])
        one = sentence_ranking(lm, pair)
        alone = rank_heads(lm, [pair.source], [pair.target], [pair.reference])
        assert one.entries == alone.entries and one.sentences == 1
    # the per-sentence AERs differ from sentence to sentence (a real per-sentence statistic)
    best = {sentence_ranking(lm, val_reference(align, [data], "de", "en", k)).of("head")[0].aer
            for k in range(len(refs))}
    assert len(best) > 1
    with pytest.raises(ValueError, match="from 0 to 4"):
        val_reference(align, [data], "de", "en", 5)


# --------------------------------------------------------------------------- the overlay

def _forced_run(lm, src: str, ref: str) -> Run:
    forced = force(lm, src, ref)
    return Run.of(lm, "de-en", forced.translation, forced=True,
                  inputs=RunInputs(model="de-en", text=src, reference=ref))


def test_a_forced_validation_pair_gets_its_reference_links_drawn(tmp_path):
    lm, refs, align, data = _setup(tmp_path)
    k = 1
    run = _forced_run(lm, SENTENCES["de"][k], SENTENCES["en"][k])
    ov = overlay_of(lm, run, "words", align, [data])
    assert len(ov.links) == len(refs[k].possible) and f"validation sentence {k}" in ov.note
    assert sum(sure for *_, sure in ov.links) == len(refs[k].sure)
    fig = views.alignment_view_figure(run, "layer", 0, 0, "words", ov).to_dict()
    link = fig["data"][0]["link"]
    src_words = run.src_words if run.src_words is not None else run.tr.src_tokens
    out_words = run.out_words if run.out_words is not None else run.tr.output_tokens
    drawn = {(s, t - len(src_words)) for s, t, c in zip(link["source"], link["target"], link["color"])
             if c in (REF_SURE, REF_POSSIBLE)}
    assert drawn == {(s, t) for s, t, _ in ov.links}
    # the links join the reference's words: source word i and target word j, as the reference says
    de, en = tokenize(SENTENCES["de"][k], "de"), tokenize(SENTENCES["en"][k], "en")
    drawn_words = [(src_words[s], out_words[t]) for s, t, _ in ov.links]     # in the reference's order
    want = [(de[i], en[j]) for i, j in sorted(refs[k].possible)]
    assert all(a in (x, "<unk>") and b in (y, "<unk>") for (a, b), (x, y) in zip(drawn_words, want)), drawn_words
    assert "reference links" in json.dumps(fig["layout"], ensure_ascii=False)


def test_no_reference_links_outside_a_forced_validation_pair(tmp_path):
    lm, refs, align, data = _setup(tmp_path)
    other = _forced_run(lm, SENTENCES["de"][0], "A man walks.")
    assert overlay_of(lm, other, "words", align, [data]).links == ()
    assert "not a validation sentence" in overlay_of(lm, other, "words", align, [data]).note
    decoded = Run.of(lm, "de-en", other.tr, inputs=RunInputs(model="de-en", text=SENTENCES["de"][0]))
    assert overlay_of(lm, decoded, "words", align, [data]) .note == NOT_FORCED
    fig = views.alignment_view_figure(other, "layer", 0, 0, "words", overlay_of(lm, other, "words", align, [data]))
    assert "not a validation sentence" in json.dumps(fig.to_dict()["layout"], ensure_ascii=False)
    assert find_val_pair(tmp_path / "none", [data], "de", "en", SENTENCES["de"][0], SENTENCES["en"][0]) is None


# --------------------------------------------------------------------------- the endpoint

@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with aligned_app(tmp_path_factory) as served:
        yield served


def test_alignment_heads_endpoint_per_sentence(client, server):
    root = server[2]
    refs = read_pharaoh(root / "alignments" / "de-en.val.align")
    out = client.predict("de-en", "2", api_name="/alignment_heads")
    lm = load_checkpoint(root / "de-en")
    want = rank_heads(lm, [SENTENCES["de"][2]], [SENTENCES["en"][2]], [refs[2]])
    assert out["sentence"] == 2 and out["source"] == SENTENCES["de"][2] and out["sentences"] == 1
    assert [e["label"] for e in out["ranking"]] == [e.label for e in want.entries]
    assert [e["aer"] for e in out["ranking"]] == pytest.approx([e.aer for e in want.entries])
    assert {(i, j) for i, j, _ in out["links"]} == refs[2].possible
    assert {(i, j) for i, j, sure in out["links"] if sure} == refs[2].sure
    whole = client.predict("de-en", "", api_name="/alignment_heads")
    assert "sentence" not in whole and whole["sentences"] == len(SENTENCES["de"])
    with pytest.raises(Exception, match="whole number"):
        client.predict("de-en", "two", api_name="/alignment_heads")
    with pytest.raises(Exception, match="from 0 to 4"):
        client.predict("de-en", "9", api_name="/alignment_heads")
