"""The input guardrails: unfamiliar input, an output stuck in a loop, a long input translated only in part.
By hand on token lists, then on the shipped checkpoints with the inputs that showed each failure."""
from pathlib import Path

import pytest

from model.analysis.guardrails import Repetition, RunCheck, check_run, repetition
from model.engine.decoding import DecodeOptions, translate
from model.families import load_checkpoint
from ui.present import run_notices

ROOT = Path(__file__).resolve().parents[2] / "checkpoints"
OPTS = DecodeOptions(max_len=100, trace=False)  # the UI's default length limit
CHINESE = "一个男人在骑自行车，两只狗在雪地里玩耍。"
PLAIN = {"de-en": "Zwei Hunde spielen im Schnee.", "en-de": "Two dogs are playing in the snow.",
         "en-fr": "Two dogs are playing in the snow.", "fr-en": "Deux chiens jouent dans la neige."}


@pytest.fixture(scope="module")
def models():
    return {name: load_checkpoint(ROOT / name) for name in PLAIN}


def test_repetition_by_hand():
    assert repetition("A dog runs across the grass . <eos>".split()) is None
    assert repetition("cut cut cut from".split()) is None  # three times is not yet a loop
    assert repetition("Frent cut cut cut cut cut from".split()) == Repetition(["cut"], 5, 1)
    # of equal runs the shortest n-gram is named; a longer run wins over an earlier one
    assert repetition("a b a b a b a b c".split()) == Repetition(["a", "b"], 4, 0)
    assert repetition("x x x x y z y z y z y z y z".split()) == Repetition(["y", "z"], 5, 4)
    assert repetition("cut cut cut cut cut cut cut cut".split()).ngram == ["cut"]
    assert repetition(["<pad>"] * 6 + ["<eos>"]) is None  # specials are not words said


def test_stopped_early_needs_several_sentences_and_a_short_finished_output():
    check = lambda **kw: RunCheck(**{**dict(src_words=20, unfamiliar_words=0, sentences=2, output_words=8,  # noqa: E731
                                             finished=True, repetition=None), **kw})
    assert check().stopped_early
    assert not check(sentences=1).stopped_early          # one long sentence: nothing was left out
    assert not check(output_words=18).stopped_early      # both sentences came back
    assert not check(finished=False).stopped_early       # cut by the length limit, not stopped by the model
    assert check(unfamiliar_words=7).mostly_unfamiliar and not check(unfamiliar_words=6).mostly_unfamiliar


def test_plain_sentences_raise_nothing(models):
    for name, lm in models.items():
        tr = translate(lm, PLAIN[name], OPTS)
        check = check_run(lm, tr)
        assert (check.unfamiliar_words, check.repetition, check.stopped_early, check.sentences) == (0, None, False, 1)
        assert run_notices(tr, [], lm) == [], name


def test_chinese_is_named_unfamiliar_on_every_direction(models):
    for name, lm in models.items():
        tr = translate(lm, CHINESE, OPTS)
        assert any(t.startswith("<0x") for t in tr.src_tokens)  # byte fallback
        check = check_run(lm, tr)
        assert check.mostly_unfamiliar and check.unfamiliar_share == 1.0, name
        notices = run_notices(tr, [], lm)
        assert any("outside what the model learned" in n for n in notices), notices


def test_a_looping_output_is_named(models):
    lm = models["de-en"]
    tr = translate(lm, "一个男人在骑自行车。", OPTS)  # de-en answers "Frent cut cut cut ... eggs eggs ..."
    rep = check_run(lm, tr).repetition
    assert rep is not None and rep.times >= 4
    assert tr.output_tokens[rep.start:rep.start + rep.times * len(rep.ngram)] == rep.ngram * rep.times
    said = lm.tgt_vocab.to_text(rep.ngram, lm.tgt_lang)
    assert any(f"repeats “{said}” {rep.times} times" in n for n in run_notices(tr, [], lm))


def test_emoji_only_input_is_unfamiliar_but_one_emoji_is_not(models):
    lm = models["de-en"]
    emoji = translate(lm, "🐶🐱🎉 ein Hund 😀", OPTS)
    check = check_run(lm, emoji)
    assert (check.unfamiliar_words, check.src_words) == (4, 6) and check.mostly_unfamiliar
    one = check_run(lm, translate(lm, "Ein Hund 🐶 läuft über die Wiese.", OPTS))
    assert one.unfamiliar_words == 1 and not one.mostly_unfamiliar


def test_a_long_input_translated_in_part_is_named(models):
    lm = models["de-en"]
    text = ("Ein Mann fährt mit dem Fahrrad durch die Stadt. Zwei Hunde spielen im Schnee. "
            "Eine Frau liest ein Buch im Park. " * 30)[:2000]
    tr = translate(lm, text, OPTS)
    check = check_run(lm, tr)
    assert tr.truncated and check.sentences > 20 and check.finished and check.stopped_early
    assert check.output_words < 0.2 * check.src_words  # the model stopped after about one sentence
    notices = run_notices(tr, [], lm)
    assert any("tokens; it was cut there" in n for n in notices)
    assert any(f"The input has {check.sentences} sentences" in n and "one sentence at a time" in n for n in notices)
