"""What a run's tokens say about whether to trust it: input the model never learned to read, an output
stuck in a loop, and a long input of which only the start was translated.

The models learned from one short image caption at a time. On other input they fail in recognisable ways:
text in another script reaches them spelled byte by byte (a subword vocabulary's byte fallback) or as
``<unk>``, the decoder repeats one or a few tokens until the length limit, and an input of several
sentences comes back as about one, because a caption ends after one sentence.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from model.engine.config import UNK_ID
from model.engine.loaded import LoadedModel
from model.engine.results import Translation
from model.engine.vocab import SPECIALS

BYTE_PIECE = re.compile(r"^<0x[0-9A-Fa-f]{2}>$")  # a byte-fallback piece
SENTENCE_END = {".", "!", "?", "…"}
UNFAMILIAR_SHARE = 0.3   # more than this share of source words unfamiliar: warn
MIN_REPEATS = 4          # an n-gram this many times in a row is a loop
MAX_NGRAM = 4
SHORT_OUTPUT = 0.6       # a finished output under this share of the source's words, after several sentences


@dataclass(frozen=True)
class Repetition:
    """``ngram`` (output tokens) said ``times`` times in a row, from output position ``start``."""
    ngram: list[str]
    times: int
    start: int


@dataclass(frozen=True)
class RunCheck:
    """The guardrails' reading of one run."""
    src_words: int           # source words, specials left out
    unfamiliar_words: int    # of them, words read through byte-fallback pieces or as <unk>
    sentences: int           # sentences in the (possibly cut) source
    output_words: int        # output words, specials left out
    finished: bool           # the output ended with <eos> (not at the length limit)
    repetition: Repetition | None

    @property
    def unfamiliar_share(self) -> float:
        return self.unfamiliar_words / self.src_words if self.src_words else 0.0

    @property
    def mostly_unfamiliar(self) -> bool:
        return self.unfamiliar_share > UNFAMILIAR_SHARE

    @property
    def stopped_early(self) -> bool:
        """Several sentences went in and a finished output far shorter than the input came out."""
        return self.sentences > 1 and self.finished and self.output_words < SHORT_OUTPUT * self.src_words


def repetition(tokens: list[str], min_repeats: int = MIN_REPEATS, max_n: int = MAX_NGRAM) -> Repetition | None:
    """The longest run (in tokens) of one n-gram (1..max_n tokens) repeated at least ``min_repeats`` times
    in a row, or None. Specials are left out of the search."""
    toks = [t for t in tokens if t not in SPECIALS]
    best: Repetition | None = None
    for n in range(1, max_n + 1):
        i = 0
        while i + n * min_repeats <= len(toks):
            times = 1
            while toks[i + times * n:i + (times + 1) * n] == toks[i:i + n]:
                times += 1
            # strictly longer only: of equal runs the shortest n-gram ("cut" x8, not "cut cut" x4) is kept
            if times >= min_repeats and (best is None or times * n > best.times * len(best.ngram)):
                best = Repetition(ngram=toks[i:i + n], times=times, start=i)
            i += max(1, (times - 1) * n) if times >= min_repeats else 1
    return best


def _sentences(words: list[str]) -> int:
    """Sentences in a list of words: one, plus one per sentence end followed by more words."""
    body = [w for w in words if w not in SPECIALS]
    return 1 + sum(1 for i, w in enumerate(body[:-1]) if w in SENTENCE_END and body[i + 1] not in SENTENCE_END)


def check_run(lm: LoadedModel, tr: Translation) -> RunCheck:
    """Read ``tr``'s source and output tokens for the failures listed in this module's docstring."""
    sv, tv = lm.src_vocab, lm.tgt_vocab
    src_spans = [s for s in sv.word_spans(tr.src_tokens) if tr.src_tokens[s[0]] not in SPECIALS]
    unfamiliar = sum(1 for s in src_spans
                     if any(BYTE_PIECE.match(tr.src_tokens[i]) or tr.src_ids[i] == UNK_ID for i in s))
    out_words = [w for w in tv.join(tr.output_tokens) if w not in SPECIALS]
    return RunCheck(src_words=len(src_spans), unfamiliar_words=unfamiliar, sentences=_sentences(sv.join(tr.src_tokens)),
                    output_words=len(out_words), finished=bool(tr.output_tokens) and tr.output_tokens[-1] == "<eos>",
                    repetition=repetition(tr.output_tokens))
