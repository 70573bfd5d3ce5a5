"""The Multi30k texts the app reads ship with it: a fresh clone (or a Space) without ``../shared`` has the
head profiles' validation average, the alignment ranking of one validation sentence, the reference links of
a forced validation pair, and validation pairs in Forced decoding."""
from __future__ import annotations

import gzip
from pathlib import Path
from types import SimpleNamespace

import pytest

from model.analysis.alignment.sentence import find_val_pair, sentence_ranking, val_reference
from model.analysis.alignment.reference import reference_path
from model.families import load_checkpoint
from model.families.ours import find_checkpoints
from ui import calls
from ui.present.payload import reference_pairs, validation_sentences
from ui.sections import analysis

from tests.app_fixtures import make_checkpoint

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "checkpoints" / "multi30k"
ALIGNMENTS = ROOT / "checkpoints" / "alignments"
LINES = {"val": 1014, "test_2016_flickr": 1000}
LANGS = ("de", "en", "fr", "cs")


def _lines(path: Path) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return f.read().splitlines()


@pytest.fixture
def only_shipped(monkeypatch):
    """``../shared`` as a fresh clone has it: absent. Any read of a path outside the repository fails."""
    real = gzip.open

    def guarded(path, *args, **kwargs):
        if isinstance(path, (str, Path)) and not Path(path).resolve().is_relative_to(ROOT):
            raise FileNotFoundError(path)
        return real(path, *args, **kwargs)
    monkeypatch.setattr(gzip, "open", guarded)


def test_the_app_reads_only_the_texts_shipped_in_the_repository():
    assert calls.DATA_DIRS == [ROOT / "checkpoints" / "multi30k"]
    names = sorted(p.name for p in SHIPPED.glob("*.gz"))
    assert names == sorted(f"{s}.{lang}.gz" for s in LINES for lang in LANGS)
    for split, n in LINES.items():
        for lang in LANGS:
            lines = _lines(SHIPPED / f"{split}.{lang}.gz")
            assert len(lines) == n and all(line.strip() for line in lines)
    # never the training set, anywhere in the shipped folders
    assert not list((ROOT / "checkpoints").rglob("train.*"))
    # a data folder, not a model: the checkpoint scan leaves it out
    assert SHIPPED not in find_checkpoints(ROOT / "checkpoints")


def test_head_profiles_average_the_shipped_validation_sentences(tmp_path, only_shipped):
    sentences, source = validation_sentences("de", calls.DATA_DIRS, 16)
    assert sentences == [s for s in _lines(SHIPPED / "val.de.gz") if len(s) <= 200][:16]
    assert source == "val.de.gz (first 16)"
    make_checkpoint(tmp_path / "de-en", "de", "en", seed=0)
    key, reg = calls.load_registry(tmp_path, device="cpu")
    shell = SimpleNamespace(reg=reg, reg_key=key)
    for n in (16, 8):
        md, fig, rows, _ = analysis._profiles(shell, None, "de-en", "average", n, "entropy")
        # the note, the title and the slider agree on what was averaged
        assert f"averaged over {n} sentences: val.de.gz" in md and f"first {n}" in md and "stand in" not in md
        assert f"mean over {n} sentences" in fig.layout.title.text
        assert rows


def test_czech_validation_sentences_are_read_for_head_profiles(only_shipped):
    sentences, source = validation_sentences("cs", calls.DATA_DIRS, 16)
    assert sentences == [s for s in _lines(SHIPPED / "val.cs.gz") if len(s) <= 200][:16]
    assert source == "val.cs.gz (first 16)" and any("ž" in s or "ř" in s for s in sentences)


@pytest.mark.parametrize("src,tgt", [("de", "en"), ("cs", "en"), ("en", "cs")])
def test_one_validation_sentence_is_ranked_from_the_shipped_texts(src, tgt, only_shipped):
    lm = load_checkpoint(ROOT / "checkpoints" / f"{src}-{tgt}")
    pair = val_reference(ALIGNMENTS, calls.DATA_DIRS, src, tgt, 7)
    assert (pair.source, pair.target) == (_lines(SHIPPED / f"val.{src}.gz")[7], _lines(SHIPPED / f"val.{tgt}.gz")[7])
    r = sentence_ranking(lm, pair, reference_path(ALIGNMENTS, src, tgt))
    cfg = lm.model.cfg
    assert r.sentences == 1 and len(r.of("head")) == cfg.n_decoder_layers * cfg.n_heads
    assert all(0.0 <= e.aer <= 1.0 for e in r.entries)


@pytest.mark.parametrize("src,tgt", [("de", "en"), ("en", "fr"), ("cs", "en")])
def test_forced_decoding_offers_validation_pairs_with_reference_links(src, tgt, only_shipped):
    pairs = reference_pairs(src, tgt, calls.DATA_DIRS)
    assert {p.split for p in pairs} == {"val", "test_2016_flickr"}
    val = [p for p in pairs if p.split == "val"]
    assert val and all(p.label.startswith("validation · ") for p in val)
    # a validation pair is one the Alignment view draws reference links for
    for p in val[:3]:
        found = find_val_pair(ALIGNMENTS, calls.DATA_DIRS, src, tgt, p.source, p.reference)
        assert found is not None and (found.source, found.target) == (p.source, p.reference)
    test = [p for p in pairs if p.split == "test_2016_flickr"]
    assert test and find_val_pair(ALIGNMENTS, calls.DATA_DIRS, src, tgt, test[0].source, test[0].reference) is None


def test_the_guard_stands_for_a_missing_shared_folder(only_shipped):
    # without the shipped folder, nothing else is read: the built-in examples stand in
    assert reference_pairs("de", "en", [ROOT.parent / "shared" / "multi30k"])[0].split == "test_2016_flickr"
    sentences, source = validation_sentences("de", [ROOT.parent / "shared" / "multi30k"], 16)
    assert source.startswith("built-in examples")
