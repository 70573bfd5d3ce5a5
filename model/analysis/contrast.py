"""Contrastive attribution ("why this token rather than that one?") and attribution to the target prefix.

- The target function. Without a foil: log p(token), as :mod:`model.analysis.attribution` has it. With a foil:
  the probability difference p(token) − p(foil) of Yin & Neubig (2022), which they use for contrastive
  saliency (Inseq's ``contrast_prob_diff``). A foil equal to the token gives 0 everywhere.
- Gradient × input and integrated gradients of that function, over the source token embeddings (the target
  prefix held as it is) and over the target-prefix token embeddings, the start token included (the source
  held as it is). Each side has its own zero baseline and its own completeness check: its scores add up to
  f(x) − f(that side's embeddings at 0), by the checked rule of :func:`model.analysis.attribution.integrated_gradients`
  (max(1 %, 1e-3 nats) for log p, max(1 %, 1e-4) for a probability difference).
- ALTI+ (Ferrando et al. 2022) per target-prefix token, next to the source's: the shares of
  :func:`model.analysis.attribution.alti_matrices`' row for this position. ALTI+ (like attention, rollout and the
  norm-based weights) says what the position reads, not which token it picks: it is the same for every foil,
  and said so wherever a foil is shown.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import torch

from model.engine.decoding import Translation
from model.engine.results import decoder_input
from model.engine.transformer import Transformer
from .attribution import (IG_ATOL, IG_MAX_STEPS, IG_START, Attribution, Gradients, IntegratedGradients, attribute,
                          encode_embedded, side_gradients)

PROB_ATOL = 1e-4        # completeness floor for a probability difference (probability units, not nats)
LOG_PROB = "log p(token)"
PROB_DIFF = "p(token) − p(foil)"


@dataclass(frozen=True)
class Target:
    """What the gradients explain at one step: log p(token), or p(token) − p(foil) with a foil."""
    token: int
    foil: int | None = None

    def __call__(self, logits: torch.Tensor) -> torch.Tensor:
        """(B, V) logits -> (B,) values."""
        if self.foil is None:
            return logits.log_softmax(-1)[:, self.token]
        p = logits.softmax(-1)
        return p[:, self.token] - p[:, self.foil]

    @property
    def name(self) -> str:
        return LOG_PROB if self.foil is None else PROB_DIFF

    @property
    def atol(self) -> float:
        return IG_ATOL if self.foil is None else PROB_ATOL


@dataclass(frozen=True)
class Foil:
    """A foil as asked (a piece, or a word typed in the target language) and the one token it stands for."""
    id: int
    piece: str
    asked: str
    note: str = ""      # said beside the scores: e.g. a word of several pieces stands for its first one


def resolve_foil(vocab, asked, lang: str) -> Foil | None:
    """The target token ``asked`` names: an exact vocabulary entry ("▁vieux", "<eos>"), or one word the
    vocabulary segments (its first piece, said in ``note``, when it has several). None for a blank foil;
    ValueError with a message a person can act on for anything else."""
    asked = "" if asked is None else str(asked).strip()
    if not asked:
        return None
    if asked in vocab.stoi:
        return Foil(vocab.stoi[asked], asked, asked)
    if len(asked.split()) > 1:
        raise ValueError(f"A foil is one target token: type one word, not {asked[:40]!r}.")
    pieces = vocab.tokens(asked, lang)
    ids = vocab.encode(pieces)
    if not pieces or ids[0] == vocab.stoi.get("<unk>", 0) or len(vocab.join(pieces)) != 1:
        raise ValueError(f"{asked[:40]!r} is not a word of the target vocabulary.")
    note = "" if len(pieces) == 1 else (f"“{asked}” is {len(pieces)} pieces here ({' '.join(pieces)}): the foil is "
                                        f"its first piece {pieces[0]}, the one this step would choose")
    return Foil(ids[0], pieces[0], asked, note)


@dataclass
class Side:
    """Scores over one side's tokens for one target function."""
    tokens: list[str]
    grad_input: np.ndarray
    integrated: IntegratedGradients     # values per token, with their completeness check
    alti: np.ndarray                    # ALTI+ shares (not output-specific)

    def pooled(self, spans: list[list[int]], words: list[str]) -> "Side":
        pool = lambda a: np.array([a[s].sum() for s in spans])  # noqa: E731 (every score is additive)
        return Side(list(words), pool(self.grad_input), replace(self.integrated, values=pool(self.integrated.values)),
                    pool(self.alti))


@dataclass
class Contrast:
    """Attribution of one output step for ``target``: the six methods over the source (their gradient rows
    for ``target``), and gradient × input, integrated gradients and ALTI+ over the target prefix."""
    attribution: Attribution
    prefix: Side
    target: str                 # LOG_PROB or PROB_DIFF
    p_token: float
    foil: Foil | None = None
    p_foil: float | None = None

    @property
    def contrastive(self) -> bool:
        return self.foil is not None

    def by_word(self, src_spans, src_words, prefix_spans, prefix_words) -> "Contrast":
        return replace(self, attribution=self.attribution.by_word(src_spans, src_words),
                       prefix=self.prefix.pooled(prefix_spans, prefix_words))


def _decode_embedded(model: Transformer, pemb: torch.Tensor, memory, src_mask, tgt_mask, position: int):
    """(B, V) logits at ``position`` of the decoder run on scaled target-prefix embeddings ``pemb`` (B, P, D)."""
    dec, B = model.decoder, pemb.size(0)
    x = pemb + dec.pe[: pemb.size(1)][None].to(pemb.dtype)
    memory, src_mask = memory.expand(B, -1, -1), src_mask.expand(B, -1, -1, -1)
    tgt_mask = tgt_mask.expand(B, -1, -1, -1)
    for layer in dec.layers:
        x = layer(x, memory, src_mask, tgt_mask)
    return model.generator(dec.norm(x)[:, position])


def contrast_gradients(model: Transformer, src_ids: list[int], dec_in: list[int], position: int, target: Target,
                       steps: int = IG_START, max_steps: int = IG_MAX_STEPS) -> tuple[Gradients, Gradients]:
    """(source, target prefix) gradients of ``target`` at ``position``; ``dec_in`` the decoder's inputs (the
    prefix is dec_in[:position + 1]). Each side is integrated with the other held as it is."""
    if model.training:
        raise ValueError("attribution needs the model in eval mode")
    dev = next(model.parameters()).device
    src, tgt = torch.tensor([src_ids], device=dev), torch.tensor([dec_in[: position + 1]], device=dev)
    tgt_mask = model.tgt_mask(tgt)

    def f_src(emb):
        memory, src_mask = encode_embedded(model, emb, src)
        h = model.decode(tgt.expand(emb.size(0), -1), memory, src_mask, tgt_mask.expand(emb.size(0), -1, -1, -1))
        return target(model.generator(h[:, position]))

    src_emb = model.encoder.tok_embed(src) * model.encoder.scale
    with torch.no_grad():
        memory, src_mask = encode_embedded(model, src_emb, src)
    f_prefix = lambda e: target(_decode_embedded(model, e, memory, src_mask, tgt_mask, position))  # noqa: E731
    prefix_emb = model.decoder.tok_embed(tgt) * model.decoder.scale
    return (side_gradients(f_src, src_emb, steps, max_steps, target.atol),
            side_gradients(f_prefix, prefix_emb, steps, max_steps, target.atol))


@torch.no_grad()
def _probabilities(model: Transformer, src_ids, dec_in, position: int) -> torch.Tensor:
    dev = next(model.parameters()).device
    src, tgt = torch.tensor([src_ids], device=dev), torch.tensor([dec_in[: position + 1]], device=dev)
    return model(src, tgt)[0, position].float().softmax(-1).cpu()


def attribute_contrast(model: Transformer, tr: Translation, position: int, foil: int | Foil | None = None,
                       layer: int = -1, ig_steps: int = IG_START, ig_max_steps: int = IG_MAX_STEPS) -> Contrast:
    """Every method for output ``position`` of ``tr`` (its trace full), the gradient ones for log p(token)
    without a foil and for p(token) − p(foil) with one, over the source and over the target prefix."""
    T = len(tr.output_ids)
    if not 0 <= position < T:
        raise ValueError(f"output position {position} outside 0..{T - 1}")
    if isinstance(foil, int):
        foil = Foil(foil, str(foil), str(foil))
    if foil is not None and not 0 <= foil.id < model.cfg.tgt_vocab_size:
        raise ValueError(f"foil id {foil.id} outside the target vocabulary")
    target = Target(tr.output_ids[position], None if foil is None else foil.id)
    dec_in = decoder_input(model.cfg.decoder_start_id, tr.output_ids)
    src_side, prefix_side = contrast_gradients(model, tr.src_ids, dec_in, position, target, ig_steps, ig_max_steps)
    attr = attribute(model, tr, position, layer, ig_steps, ig_max_steps, grads=src_side)
    probs = _probabilities(model, tr.src_ids, dec_in, position)
    prefix = Side(list(tr.decoder_input_tokens[: position + 1]), prefix_side.grad_input, prefix_side.integrated,
                  np.asarray(attr.target_alti, dtype=float))
    return Contrast(attr, prefix, target.name, float(probs[target.token]), foil,
                    None if foil is None else float(probs[foil.id]))


def prefix_word_spans(out_spans: list[list[int]], out_words: list[str], position: int,
                      start_token: str) -> tuple[list[list[int]], list[str]]:
    """Words of the target prefix at ``position`` (decoder inputs 0..position: the start token, then output
    tokens 0..position - 1): the start token alone, then each output word's pieces that precede the step
    (a word cut by the step keeps the pieces it has, marked with "…")."""
    spans, words = [[0]], [start_token]
    for span, word in zip(out_spans, out_words):
        seen = [i + 1 for i in span if i < position]
        if seen:
            spans.append(seen)
            words.append(word if len(seen) == len(span) else f"{word}…")
    return spans, words


__all__ = ["Target", "Foil", "resolve_foil", "Side", "Contrast", "attribute_contrast", "contrast_gradients",
           "side_gradients", "prefix_word_spans", "LOG_PROB", "PROB_DIFF", "PROB_ATOL"]
