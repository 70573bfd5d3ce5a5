"""What one browser session keeps between events (in gr.State; never shared between sessions).

A ``Run`` is the current run: every section draws it, and the run bar names it. Values here are
plain dataclasses of Translations, so they pickle across the ZeroGPU boundary and deep-copy per session.
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from model.analysis import BeamTree
from model.decoding import Translation
from model.hooks import Trace
from model.transformer import CROSS, Interventions


@dataclass
class Run:
    """One translation: the model, the result, what the user was told, and word spans."""
    model: str
    tr: Translation
    notices: list[str] = field(default_factory=list)
    # subword models: which pieces form each word of the source and the output (None: a token is a word)
    src_spans: list[list[int]] | None = None
    out_spans: list[list[int]] | None = None
    src_words: list[str] | None = None
    out_words: list[str] | None = None
    forced: bool = False  # teacher-forced on a reference rather than decoded
    id: str = field(default_factory=lambda: uuid.uuid4().hex[:6])

    @classmethod
    def of(cls, lm, name: str, tr: Translation, notices: list[str] | None = None, forced: bool = False) -> "Run":
        if lm.src_vocab.kind == "word":
            return cls(name, tr, list(notices or []), forced=forced)
        w = tr.words(lm)
        return cls(name, tr, list(notices or []), w.src_spans, w.output_spans, w.src, w.output, forced)

    def by_word(self, units: str) -> bool:
        return units == "words" and self.src_spans is not None


@dataclass
class CompareRun:
    """The current run beside a modified model on the same source."""
    model: str
    base: Translation
    mod: Translation
    mod_on_base: Trace  # the modified model teacher-forced on the baseline's output: rows line up
    iv: Interventions
    run_id: str = ""    # the Run it compared against


@dataclass
class BeamView:
    """The beam search the Generation section shows."""
    model: str
    tr: Translation
    tree: BeamTree
    run_id: str = ""


@dataclass
class PairRun:
    model: str
    a: Translation
    b: Translation


@dataclass(frozen=True)
class Selection:
    """The head every view points at: kind, layer, head, and the generation step."""
    kind: str = CROSS
    layer: int = 0
    head: int = 0
    step: int = 0
