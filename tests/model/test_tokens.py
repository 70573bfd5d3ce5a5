"""The one resolver from typed text to a target token (model.engine.tokens), on our shipped de-en vocabulary and on
a tiny random Marian one: a word is its word-start piece, a piece typed with ▁ is taken as it is, a word of
several pieces and an unknown word are reported in words, never guessed."""
from __future__ import annotations

from pathlib import Path

import pytest

from model.engine.tokens import resolve_token
from model.engine.vocab import load_vocabs

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def ours():
    return load_vocabs(ROOT / "checkpoints" / "de-en" / "vocab.json")[1]


@pytest.fixture(scope="module")
def marian(tmp_path_factory):
    pytest.importorskip("transformers")
    from model.families import load_checkpoint
    from tests.model.test_marian import build_marian
    return load_checkpoint(build_marian(tmp_path_factory.mktemp("marian") / "opus-mt-de-en")).tgt_vocab


def test_a_word_is_its_word_start_piece_not_the_mid_word_one(ours):
    assert "dog" in ours.stoi and "▁dog" in ours.stoi  # both pieces exist: the bench used to read "dog"
    c = resolve_token(ours, "dog", "en")
    assert (c.ok, c.piece, c.id) == (True, "▁dog", ours.stoi["▁dog"])
    assert "▁dog" in c.message
    rides = resolve_token(ours, "rides", "en")
    assert rides.piece == "▁rides" and rides.id == ours.stoi["▁rides"]


def test_a_piece_typed_with_its_mark_or_a_special_is_taken_as_it_is(ours):
    for typed in ("▁dog", "▁bicycle", "<eos>"):
        c = resolve_token(ours, typed, "en")
        assert (c.piece, c.id, c.message) == (typed, ours.stoi[typed], "")
    assert not resolve_token(ours, "▁zzqqxx", "en").ok


def test_a_word_of_several_pieces_is_reported_not_guessed(ours):
    pieces = ours.tokens("unbelievable", "en")
    assert len(pieces) > 1
    c = resolve_token(ours, "unbelievable", "en")
    assert not c.ok and c.id is None and c.piece is None
    assert f"{len(pieces)} pieces" in c.message and " ".join(pieces) in c.message


def test_an_unknown_word_and_several_words_are_reported(ours):
    for text in ("xyzzy", "Ωμέγαζ"):
        c = resolve_token(ours, text, "en")
        assert not c.ok and "not a word of the target vocabulary" in c.message
    assert "several words" in resolve_token(ours, "a dog", "en").message
    assert resolve_token(ours, "  ", "en") is None and resolve_token(ours, None, "en") is None


def test_a_word_vocabulary_maps_a_word_to_itself():
    from tests.app_fixtures import tiny_vocab
    v = tiny_vocab("en")
    c = resolve_token(v, "dogs", "en")
    assert (c.piece, c.id, c.message) == ("dogs", v.stoi["dogs"], "")
    assert "not a word" in resolve_token(v, "Xylophonzz", "en").message


def test_the_same_rules_on_a_marian_vocabulary(marian):
    starts = [t for t in marian.itos if t.startswith("▁") and len(t) > 2 and marian.tokens(t[1:]) == [t]]
    assert starts
    word = starts[0][1:]
    c = resolve_token(marian, word)
    assert (c.ok, c.piece, c.id) == (True, starts[0], marian.stoi[starts[0]])
    assert resolve_token(marian, starts[0]).message == ""                 # typed with ▁: as it is
    assert resolve_token(marian, "</s>").piece == "</s>"                   # Marian's own special
    multi = next(w for w in ("street", "bicycle", "children", "apples") if len(marian.tokens(w)) > 1)
    m = resolve_token(marian, multi)
    assert not m.ok and "pieces here" in m.message
    u = resolve_token(marian, "qqqxyzzy")
    assert not u.ok and "not a word of the target vocabulary" in u.message


def test_the_patching_bench_and_the_attribution_foil_read_the_same_token():
    """The bench used to read a typed "dog" as the mid-word piece: it now reads ▁dog, as Attribution does."""
    from model.analysis import patching_bench as P
    from model.families import load_checkpoint
    from model.analysis.contrast import resolve_foil
    lm = load_checkpoint(ROOT / "checkpoints" / "de-en", "cpu")
    req = P.PatchRequest("Der Hund jagt die Katze.", "Die Katze jagt den Hund.", layer=0, head=0, target="cat",
                         foil="dog", step=1)
    bench = P.patch_bench(lm, req)
    assert (bench.target_token, bench.foil_token) == ("▁cat", "▁dog")
    assert bench.setup.foil == resolve_foil(lm.tgt_vocab, "dog", "en").id == lm.tgt_vocab.stoi["▁dog"]
    assert any("▁dog" in n for n in bench.notes)
    with pytest.raises(P.PatchError, match="pieces here"):
        P.patch_bench(lm, P.PatchRequest(req.text_a, req.text_b, foil="unbelievable"))
