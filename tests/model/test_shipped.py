"""Smoke tests of the checkpoints shipped in checkpoints/: they load, translate sensibly, and their
model card's metrics belong to them.

Every direction the README promises must be there: a missing folder fails, it is not skipped.
"""
import json
from pathlib import Path

import pytest

from model.engine.config import TransformerConfig
from model.engine.decoding import DecodeOptions, translate
from model.families import load_checkpoint
from model.families.ours import find_checkpoints

ROOT = Path(__file__).resolve().parents[2] / "checkpoints"
SHIPPED = find_checkpoints(ROOT)

# (sentence, groups of acceptable content words; every group must be matched)
EXAMPLES = {
    "de-en": [("Ein Mann fährt mit dem Fahrrad durch die Stadt.", [{"man"}, {"bike", "bicycle", "cycling"}]),
              ("Zwei Hunde spielen im Schnee.", [{"two"}, {"dogs"}, {"snow"}]),
              ("Eine Frau liest ein Buch.", [{"woman", "lady"}, {"book"}])],
    "en-de": [("A man rides a bike through the city.", [{"mann"}, {"fahrrad"}]),
              ("Two dogs are playing in the snow.", [{"zwei"}, {"hunde"}, {"schnee"}]),
              ("A woman is reading a book.", [{"frau"}, {"buch"}])],
    "en-fr": [("A black dog runs on the beach.", [{"chien"}, {"noir"}, {"plage"}]),
              ("Two men are playing soccer.", [{"deux"}, {"hommes"}, {"football", "foot", "soccer"}]),
              ("A woman in a red dress is walking down the street.", [{"femme"}, {"robe"}, {"rouge"}])],
    "fr-en": [("Un chien noir court sur la plage.", [{"black"}, {"dog"}, {"beach"}]),
              ("Deux hommes jouent au football.", [{"two"}, {"men"}, {"soccer", "football"}]),
              ("Une femme en robe rouge marche dans la rue.", [{"woman", "lady"}, {"red"}, {"dress"}])],
    "en-cs": [("Two dogs are playing in the snow.", [{"dva"}, {"psi"}, {"sněhu"}]),
              ("A woman is reading a book in the park.", [{"žena"}, {"knihu"}, {"parku"}]),
              ("A black dog runs on the beach.", [{"černý"}, {"pes"}, {"pláži"}])],
    "cs-en": [("Dva psi si hrají ve sněhu.", [{"two"}, {"dogs"}, {"snow"}]),
              ("Žena čte knihu v parku.", [{"woman", "lady"}, {"book"}, {"park"}]),
              ("Muž krájí chléb nožem.", [{"man"}, {"bread"}, {"knife"}])],
}
# Floors on the Multi30k literature's metric (tokenized lowercased BLEU, test_2016_flickr, beam 5).
FLOORS = {"de-en": 42.0, "en-de": 41.5, "en-fr": 58.0, "fr-en": 50.0, "en-cs": 33.0, "cs-en": 41.0}


def test_every_direction_is_shipped():
    assert sorted(p.name for p in SHIPPED) == sorted(FLOORS)


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_shipped_model_translates_known_sentences(path):
    lm = load_checkpoint(path)
    assert lm.name in EXAMPLES, f"no smoke sentences for {lm.name}"
    for sentence, groups in EXAMPLES[lm.name]:
        out = translate(lm, sentence, DecodeOptions(beam=5, trace=False)).text.lower()
        words = set(out.replace(".", " ").replace(",", " ").split())
        for group in groups:
            assert words & group, f"{lm.name}: {sentence!r} -> {out!r} lacks any of {sorted(group)}"


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_shipped_card_matches_checkpoint(path):
    lm = load_checkpoint(path)
    metrics = json.loads((path / "metrics.json").read_text())
    assert (path / "MODEL_CARD.md").is_file()
    assert metrics["model"] == lm.name
    assert metrics["parameters"] == lm.model.num_parameters()
    # a card written before the config grew a field reads it at its default, as the checkpoint does
    assert TransformerConfig.from_dict(metrics["config"]) == lm.model.cfg
    assert metrics["length_penalty"] == lm.meta["length_penalty"]
    tok = metrics["bleu"]["test_2016_flickr"][f"beam{metrics['beam']}"]["tokenized"]
    assert tok["refs"] == "official tokenized references"
    assert tok["bleu"] >= FLOORS[lm.name], f"{lm.name}: {tok['bleu']} < {FLOORS[lm.name]}"
    size = sum(f.stat().st_size for f in path.iterdir() if f.is_file())
    assert size <= 10 * 1024 * 1024, f"{path} is {size / 2**20:.1f} MB"


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_header_names_the_headline_metric_in_words(path):
    from model.families.catalog import headline_bleu
    lm = load_checkpoint(path)
    tok = lm.metrics["bleu"]["test_2016_flickr"][f"beam{lm.metrics['beam']}"]["tokenized"]["bleu"]
    assert headline_bleu(lm.metrics) == (tok, f"test, beam {lm.metrics['beam']}, tokenized lowercased")


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_word_order_preset_changes_the_translation(path):
    """The preset's sentence: switching the positional encoding off changes the greedy translation."""
    from model.engine.config import Interventions
    from ui.present.payload import WORD_ORDER
    lm = load_checkpoint(path)
    demo = WORD_ORDER[lm.name]
    opts = DecodeOptions(beam=1, max_len=40)
    on = translate(lm, demo.text, opts).text
    off = translate(lm, demo.text, opts, Interventions(positional_encoding=False)).text
    assert on != off, f"{lm.name}: {demo.text!r} -> {on!r} with and without positional encoding"
    assert 0 <= demo.layer < lm.model.cfg.n_encoder_layers and 0 <= demo.head < lm.model.cfg.n_heads


def test_the_page_opens_on_german_to_english_though_czech_sorts_first():
    """The shipped directions start with cs-en; the page, the tour, the first example and the what-if
    sentences still open on de-en, as the static page does. Before, a de-en link changed the page's direction
    on arrival, and every section that follows Direction ran again for each visitor."""
    import app
    demo = app.build_app(ROOT, "cpu", warm=False)
    shell = demo.shell
    assert demo.registry.names[0] == "cs-en" and shell.default_model == "de-en"
    assert shell.direction.value == "de-en" and shell.tour.direction.value == "de-en"
    assert shell.translate.first_example[1] == "de-en"
    german = {b.value for b in demo.blocks.values() if getattr(b, "label", None) in ("Sentence A", "Sentence B")}
    assert german == {"Der Mann sieht die Frau.", "Die Frau sieht den Mann."}
