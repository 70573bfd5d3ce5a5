"""Readouts of a run: a :class:`Translation`'s trace read through the numpy analyses of profiles.py."""
from __future__ import annotations

import contextlib

import numpy as np

from model.engine.beams import BeamTree, beam_tree
from model.engine.decoding import DecodeOptions, translate
from model.engine.hooks import Trace
from model.engine.loaded import LoadedModel
from model.engine.names import ATTN_KINDS, CROSS, ENC_SELF
from model.engine.results import Translation, not_padding
from .profiles import (Profiles, ProfileRow, RolloutViews, alignment_weights, average_profiles, head_profile,
                       profiles_table, rollout_views)


def rollout_data(tr: Translation, layer: int | None = None) -> RolloutViews:
    """Encoder rollout (S, S) and per-output-token source attribution (T, S) of a translation."""
    return rollout_views(tr.attention(ENC_SELF), tr.attention(CROSS), layer)


def alignment_data(tr: Translation, mode: str = "layer", layer: int = 0, head: int = 0) -> np.ndarray:
    """(T, S) weights between output tokens and source tokens for the alignment lines."""
    return alignment_weights(tr.attention(CROSS), mode, layer, head, tr.attention(ENC_SELF))


def head_profiles(tr: Translation, trace: Trace | None = None, lm: LoadedModel | None = None) -> Profiles:
    """The head profile of every attention module of a run, by (kind, layer); with a subword ``lm``
    the statistics are of the attention pooled into words."""
    by_word = lm is not None and lm.src_vocab.kind != "word"
    out = {}
    for kind in ATTN_KINDS:
        if by_word:
            attn, q, k = tr.attention_by_word(lm, kind, trace)
            valid = not_padding(q)
        else:
            attn, (q, k), valid = tr.attention(kind, trace), tr.axes(kind), tr.query_valid(kind)
        for l, pattern in enumerate(attn):
            out[(kind, l)] = head_profile(pattern, k, valid)
    return out


def average_head_profiles(lm: LoadedModel, sentences: list[str], progress=None, lock=None) -> list[ProfileRow]:
    """profiles_table rows averaged over ``sentences`` (each greedily translated, then traced).
    ``progress(i, n)`` is called before each sentence; ``lock`` (if given) is held per sentence."""
    opts = DecodeOptions(beam=1, record=False, replace_unk=False, trace=True, max_len=60)
    profs = []
    for i, s in enumerate(sentences):
        if progress is not None:
            progress(i, len(sentences))
        if not s.strip():
            continue
        with lock if lock is not None else contextlib.nullcontext():
            tr = translate(lm, s, opts)
        profs.append(head_profiles(tr, lm=lm))
    return profiles_table(average_profiles(profs))


def beam_tree_data(lm: LoadedModel, tr: Translation, size: int | None = None) -> BeamTree:
    """beam_tree of a beam-search translation, with token strings and leaf translations."""
    if tr.beam is None:
        raise ValueError("this translation was decoded greedily; it has no beam-search trace")
    tree = beam_tree(tr.beam.steps, tr.beam.finished)
    for n in tree.nodes:
        n.token = "<bos>" if n.token_id is None and n.parent is None else (
            lm.tgt_vocab.decode([n.token_id])[0] if n.token_id is not None else "")
        if n.final:
            n.tokens = lm.tgt_vocab.decode(n.ids)
            n.text = lm.tgt_vocab.to_text(n.tokens, lm.tgt_lang)
    tree.length_penalty = tr.beam.length_penalty
    tree.size = size
    return tree
