"""Whether a run's input lies far from what a caption model learned, and the prominent notice that says
why and names a general-purpose model (a listed OPUS-MT one) for the same direction where there is one.
No gradio here.

The signal is the model's own confidence: the geometric mean of the probabilities of the tokens it
chose. On Multi30k-like captions our models choose with a mean of about 0.8; an everyday or news
sentence falls below half (its words arrive as many short pieces, and the decoder guesses)."""
from __future__ import annotations

import math

from model.engine.results import Translation
from model.families import catalog
from model.families.ours import Registry

LOW_CONFIDENCE = 0.5   # geometric mean of the chosen tokens' probabilities below this: far from the domain
MANY_PIECES = 3        # a source word cut into this many pieces or more is rare to the model
from . import WARNING_MARK as MARK  # notice_md shows a notice starting so as a warning box


def confidence(tr: Translation) -> float:
    """The geometric mean of the chosen tokens' probabilities (1.0 for a run without steps)."""
    probs = [max(s.prob, 1e-12) for s in tr.steps]
    return math.exp(sum(map(math.log, probs)) / len(probs)) if probs else 1.0


def rare_words(lm, tr: Translation) -> tuple[int, int]:
    """(source words cut into MANY_PIECES pieces or more, source words), specials left out."""
    toks = tr.src_tokens
    spans = [s for s in lm.src_vocab.word_spans(toks) if not toks[s[0]].startswith("<")]
    return sum(1 for s in spans if len(s) >= MANY_PIECES), len(spans)


def general_model(reg: Registry, name: str) -> str | None:
    """A listed OPUS-MT model for ``name``'s direction (its key), if the server offers one."""
    infos = catalog.infos(reg)
    me = infos.get(name)
    if me is None:
        return None
    return next((k for k, i in infos.items() if k != name and i.family == "OPUS-MT" and i.listed
                 and (i.src_lang[:2], i.tgt_lang[:2]) == (me.src_lang[:2], me.tgt_lang[:2])), None)


def notice(reg: Registry, name: str, lm, tr: Translation, label=lambda key: key) -> str | None:
    """The warning for a caption model's run far from its domain (None: none needed). ``label`` names a
    model for the user (the Direction list's entry)."""
    info = catalog.infos(reg).get(name)
    if info is None or info.family != "ours" or not tr.steps:
        return None
    conf = confidence(tr)
    if conf >= LOW_CONFIDENCE:
        return None
    rare, words = rare_words(lm, tr)
    why = (f"it was trained only on image captions (Multi30k: short descriptions of people, animals and scenes), "
           f"and it chose its words with a mean probability of {conf:.0%}, where a caption gets about 80 %")
    if rare:
        why += f"; {rare} of the {words} source words are rare to it (cut into {MANY_PIECES} or more pieces)"
    other = general_model(reg, name)
    where = (f" For everyday text pick {label(other)} in Direction: a general-purpose OPUS-MT model."
             if other else " No general-purpose model for this direction is offered here.")
    return f"{MARK}{why}. Expect a translation that has little to do with the input.{where}"
