"""What a run returns: typed results built by keyword, read by the readouts and the UI.

:class:`Translation` holds a decode (or a teacher-forced pass) and its captured :class:`Trace`;
views ask it for attention, axes, masks and words by :class:`Kind`, never for hook-name strings.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .config import NO_INTERVENTION, Interventions
from .hooks import Trace
from .loaded import LoadedModel
from .names import CROSS, DEC_SELF, ENC_SELF, Kind, hook_name


def decoder_input(start, target: list) -> list:
    """The decoder's input for ``target`` (ids or tokens): the start token, then every target item but
    the last (what teacher forcing feeds; the last item is only ever predicted)."""
    return [start] + list(target[:-1]) if len(target) else [start]


@dataclass
class StepRecord:
    step: int
    token_id: int
    token: str
    prob: float
    topk_ids: list[int]
    topk_tokens: list[str]
    topk_probs: list[float]
    self_attn: np.ndarray | None   # (layers, heads, step + 1): query = decoder input `step`
    cross_attn: np.ndarray | None  # (layers, heads, source length)


@dataclass
class BeamStep:
    """Hypotheses kept after one beam step: parent index (into the previous step's list), token, score."""
    parents: list[int]
    tokens: list[int]
    scores: list[float]


@dataclass
class FinishedHypothesis:
    ids: list[int]          # output ids, <eos> included when it ended with one
    score: float            # summed log-probability
    normalized: float       # score / length penalty, used to rank
    step: int               # the step it finished at
    beam_index: int         # index of the hypothesis it extended, in that step's input list


@dataclass
class BeamSearchTrace:
    steps: list[BeamStep]
    finished: list[FinishedHypothesis]
    length_penalty: float


@dataclass
class Translation:
    src_text: str
    src_tokens: list[str]          # <bos> ... <eos> (then <pad> if padded)
    src_ids: list[int]
    output_tokens: list[str]       # generated tokens, <eos> included; <unk> kept
    output_ids: list[int]
    text: str                      # detokenized, <unk> replaced when asked
    score: float
    steps: list[StepRecord]
    replaced: dict[int, str] = field(default_factory=dict)  # output position -> source word used
    trace: Trace | None = None
    beam: BeamSearchTrace | None = None
    interventions: Interventions = NO_INTERVENTION
    truncated: bool = False        # the source was cut to the model's maximum length
    src_lang: str = ""
    tgt_lang: str = ""
    start_token: str = "<bos>"     # the decoder's first input (Marian models start with <pad>)
    prefix_len: int = 0            # a branch: its first prefix_len output tokens were forced, not chosen

    @property
    def decoder_input_tokens(self) -> list[str]:
        """The decoder's query positions: the start token then every output token but the last."""
        return decoder_input(self.start_token, self.output_tokens)

    # Readouts of the captured trace: views ask these, never for hook-name strings.
    def attention(self, kind: Kind | str, trace: Trace | None = None) -> np.ndarray:
        """(layers, heads, queries, keys) weights of one kind, from this run's trace (or ``trace``,
        another trace of the same tokens)."""
        return (self.trace if trace is None else trace).attention(kind)

    def axes(self, kind: Kind | str) -> tuple[list[str], list[str]]:
        """(query tokens, key tokens) of an attention kind."""
        if kind == ENC_SELF:
            return list(self.src_tokens), list(self.src_tokens)
        if kind == DEC_SELF:
            return self.decoder_input_tokens, self.decoder_input_tokens
        if kind == CROSS:
            return self.decoder_input_tokens, list(self.src_tokens)
        raise ValueError(f"not an attention kind: {kind!r} (Kind.of names one)")

    def query_valid(self, kind: Kind | str) -> np.ndarray:
        """One bool per query row: False for padding queries (blanked in the views)."""
        return not_padding(self.axes(kind)[0])

    def mask(self, kind: Kind | str, trace: Trace | None = None) -> np.ndarray:
        """The mask as applied to ``kind`` (True = attend), broadcastable to (queries, keys)."""
        return (self.trace if trace is None else trace)[hook_name("mask", kind, 0)][0, 0].numpy()

    def scores(self, kind: Kind | str, layer: int, trace: Trace | None = None) -> np.ndarray:
        """(heads, queries, keys) scaled scores QKᵀ/√d_k of one layer, before the mask."""
        return (self.trace if trace is None else trace)[hook_name("scores", kind, layer)][0].float().numpy()

    def words(self, lm: LoadedModel) -> "Words":
        """Which tokens form each word of the source, the output and the decoder input."""
        dec_in = self.decoder_input_tokens
        sv, tv = lm.src_vocab, lm.tgt_vocab
        return Words(sv.word_spans(self.src_tokens), sv.join(self.src_tokens),
                     tv.word_spans(self.output_tokens), tv.join(self.output_tokens),
                     tv.word_spans(dec_in), tv.join(dec_in))

    @staticmethod
    def _axis_vocabs(lm: LoadedModel, kind: Kind | str):
        """(query vocabulary, key vocabulary) of an attention kind."""
        return (lm.src_vocab if kind == ENC_SELF else lm.tgt_vocab, lm.tgt_vocab if kind == DEC_SELF else lm.src_vocab)

    def word_spans(self, lm: LoadedModel, kind: Kind | str) -> tuple[list[list[int]], list[list[int]]]:
        """The piece indices of each word along the (query, key) axes of ``kind``."""
        (q, k), (q_vocab, k_vocab) = self.axes(kind), self._axis_vocabs(lm, kind)
        return q_vocab.word_spans(q), k_vocab.word_spans(k)

    def attention_by_word(self, lm: LoadedModel, kind: Kind | str, trace: Trace | None = None
                          ) -> tuple[np.ndarray, list[str], list[str]]:
        """Attention with pieces pooled into words (keys summed, queries averaged), and the word labels.
        Word-level models come back unchanged."""
        (q, k), (q_vocab, k_vocab) = self.axes(kind), self._axis_vocabs(lm, kind)
        return pool_words(self.attention(kind, trace), *self.word_spans(lm, kind)), q_vocab.join(q), k_vocab.join(k)

    def step_view(self, t: int) -> "StepView":
        """What generation step ``t`` (clamped) saw and chose, from the recorded steps."""
        if not self.steps:
            raise ValueError("the translation holds no step records")
        t = max(0, min(int(t), len(self.steps) - 1))
        rec = self.steps[t]
        tokens, probs = list(rec.topk_tokens), list(rec.topk_probs)
        chosen = rec.topk_ids.index(rec.token_id) if rec.token_id in rec.topk_ids else None
        if chosen is None:  # beam search may keep a token outside this hypothesis's top-k
            tokens.append(rec.token)
            probs.append(rec.prob)
            chosen = len(tokens) - 1
        return StepView(t, len(self.steps), rec.token, rec.prob, self.decoder_input_tokens[: t + 1], tokens, probs,
                        chosen, rec.cross_attn, rec.self_attn)


@dataclass
class Words:
    """Token spans of each word (subword models: a word is several pieces; else one token each)."""
    src_spans: list[list[int]]
    src: list[str]
    output_spans: list[list[int]]
    output: list[str]
    decoder_input_spans: list[list[int]]
    decoder_input: list[str]


@dataclass
class StepView:
    """One generation step: the prefix read, the top-k offered, the token chosen, its attention rows."""
    t: int
    n: int
    token: str
    prob: float
    prefix: list[str]              # decoder inputs 0..t
    topk_tokens: list[str]
    topk_probs: list[float]
    chosen: int                    # index of the chosen token in topk_tokens
    cross: np.ndarray | None       # (layers, heads, source length)
    self_: np.ndarray | None       # (layers, heads, t + 1)


def not_padding(tokens: list[str]) -> np.ndarray:
    """One bool per token (or word): False for <pad>, whose query rows the views blank."""
    return np.array([t != "<pad>" for t in tokens], dtype=bool)


def pool_words(weights: np.ndarray, query_spans: list[list[int]], key_spans: list[list[int]]) -> np.ndarray:
    """Attention over subword pieces as attention over words (Clark et al. 2019).

    ``weights`` is (..., queries, keys); each span lists the piece indices of one word. A word's
    weight as a key is the sum over its pieces, and as a query the mean over its pieces, so rows
    that summed to 1 still do, and a word made of one piece is unchanged.
    """
    keys = np.stack([weights[..., span].sum(-1) for span in key_spans], -1)
    return np.stack([keys[..., span, :].mean(-2) for span in query_spans], -2)
