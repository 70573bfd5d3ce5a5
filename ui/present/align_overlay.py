"""The reference links the Alignment view draws over the attention lines, when they apply.

They apply when the current run is a Multi30k validation sentence teacher-forced on its own reference
translation (Computation → Forced decoding): then the shipped reference alignment of that sentence
is mapped onto the words the view shows. Otherwise the view's caption says why there are none.
"""
from __future__ import annotations

from dataclasses import dataclass

from model.analysis.alignment.heads import _specials
from model.analysis.alignment.sentence import find_val_pair
from model.engine.vocab import tokenize

from .. import calls
from ..state import Run

NOT_FORCED = ("no reference links: they are drawn when the current run is a validation sentence teacher-forced "
              "on its reference (Computation → Forced decoding: pick a validation pair)")


@dataclass(frozen=True)
class Overlay:
    """Reference links in the view's own indices: (source position, output row, sure); and a caption line."""
    links: tuple[tuple[int, int, bool], ...]
    note: str


def _content(items: list[str], specials: set[str]) -> list[int]:
    return [k for k, w in enumerate(items) if w not in specials]


def overlay_for(reg_key: str, run: Run | None, units: str) -> Overlay:
    """The current run's reference links, or none with the reason."""
    if run is None or not run.forced or run.inputs is None or run.inputs.reference is None:
        return Overlay((), NOT_FORCED)
    return overlay_of(calls.lm_for(reg_key, run.model), run, units, calls.align_dir(reg_key), calls.DATA_DIRS)


def overlay_of(lm, run: Run, units: str, folder, data_dirs) -> Overlay:
    """``run`` (of ``lm``)'s reference links from the reference files in ``folder`` and the validation
    texts in the first of ``data_dirs`` that has them."""
    inputs = run.inputs
    if not run.forced or inputs is None or inputs.reference is None:
        return Overlay((), NOT_FORCED)
    pair = find_val_pair(folder, data_dirs, lm.src_lang, lm.tgt_lang, inputs.text, inputs.reference)
    if pair is None:
        return Overlay((), "no reference links: this forced pair is not a validation sentence with its reference "
                           f"(or no {lm.src_lang}-{lm.tgt_lang} reference alignment is shipped)")
    if run.src_spans is not None and not run.by_word(units):
        return Overlay((), f"validation sentence {pair.index}: its reference links are on words; show words to "
                           "see them")
    src = run.src_words if run.src_words is not None else run.tr.src_tokens
    out = run.out_words if run.out_words is not None else run.tr.output_tokens
    specials = _specials(lm)
    src_at, out_at = _content(list(src), specials), _content(list(out), specials)
    if len(src_at) != len(tokenize(pair.source, lm.src_lang)) or len(out_at) != len(tokenize(pair.target, lm.tgt_lang)):
        return Overlay((), f"validation sentence {pair.index}: the model's words do not match the reference's, "
                           "so its links are not drawn")
    links = tuple((src_at[i], out_at[j], (i, j) in pair.reference.sure) for i, j in sorted(pair.reference.possible))
    return Overlay(links, f"green: validation sentence {pair.index}'s reference links (a statistical aligner's, "
                          "not human gold; sure solid, possible pale)")
