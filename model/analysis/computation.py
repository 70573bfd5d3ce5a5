"""Readouts of the whole computation from a captured trace, and forced decoding with a reference.

Every hook name is built by :func:`hook_name`; callers ask :class:`Computation` for quantities
(one head's arithmetic, residual-stream norms, norm-based weights, the logit lens, the embedding
steps) and never assemble hook-name strings themselves.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from model.engine.config import NO_INTERVENTION, Interventions
from model.engine.decoding import full_trace, generable, prepare_source, start_token
from model.engine.hooks import Trace
from model.engine.loaded import LoadedModel
from model.engine.names import CROSS, DEC_SELF, ENC_SELF, Kind, hook_name
from model.engine.results import StepRecord, Translation
from model.engine.transformer import Transformer
from .postnorm import SUBLAYERS, Decomposed, ln_linear

@dataclass
class HeadComputation:
    """One head, one query: the tutorial's formula step by step (numpy, batch row 0)."""
    query: np.ndarray      # (d_k,)
    keys: np.ndarray       # (Tk, d_k)
    scores: np.ndarray     # (Tk,) q k^T / sqrt(d_k), before the mask
    mask: np.ndarray       # (Tk,) bool, True = attend
    masked: np.ndarray     # (Tk,) scores with -inf where the mask hides the key
    pattern: np.ndarray    # (Tk,) softmax row
    values: np.ndarray     # (Tk, d_k)
    z: np.ndarray          # (d_k,) alpha V
    result: np.ndarray     # (D,) this head's contribution after its slice of W_O (no bias)


@dataclass
class ResidualNorms:
    """Per layer and position: L2 norms of the residual stream and of what each sublayer adds."""
    resid: np.ndarray               # (L + 1, T): before layer 0, then after each layer
    attn: np.ndarray                # (L, T) self-attention contribution
    cross: np.ndarray | None        # (L, T) cross-attention contribution (decoder only)
    ffn: np.ndarray                 # (L, T) FFN contribution
    # post-norm models: attn/cross/ffn above are each sublayer's share of the normalised stream (its output
    # through the LayerNorm that follows, the token's sigma fixed); these are its output before that norm
    post_norm: bool = False
    attn_raw: np.ndarray | None = None
    cross_raw: np.ndarray | None = None
    ffn_raw: np.ndarray | None = None


@dataclass
class LogitLens:
    """Decoder residual after each layer, through the final norm and the generator."""
    top_ids: np.ndarray    # (L, T, k)
    top_probs: np.ndarray  # (L, T, k)
    probs: np.ndarray      # (L, T, V)


@dataclass
class EmbeddingSteps:
    """Per position: the token embedding, its scaling by sqrt(d_model), and the encoding added."""
    token: np.ndarray      # (T, D) embedding row
    scaled: np.ndarray     # (T, D) token * sqrt(d_model)
    pos: np.ndarray        # (T, D) positional encoding (zeros when switched off)
    total: np.ndarray      # (T, D) scaled + pos, the first layer's input
    scale: float

    def norms(self) -> "EmbeddingNorms":
        n = lambda a: np.linalg.norm(a, axis=-1)  # noqa: E731
        return EmbeddingNorms(token=n(self.token), scaled=n(self.scaled), pos=n(self.pos), total=n(self.total))


@dataclass(frozen=True)
class EmbeddingNorms:
    """(T,) L2 norms of each of :class:`EmbeddingSteps`'s stages, per position."""
    token: np.ndarray
    scaled: np.ndarray
    pos: np.ndarray
    total: np.ndarray


@dataclass
class Computation:
    """A full (teacher-forced) trace read with the model that produced it."""
    trace: Trace
    model: Transformer
    interventions: Interventions = NO_INTERVENTION  # the run's: ablated heads add nothing to any sum

    def get(self, point: str, where: str | None = None, layer: int | None = None, call: int = -1) -> torch.Tensor:
        name = hook_name(point, where, layer)
        if name not in self.trace:
            raise KeyError(f"{name} was not captured")
        return self.trace.calls(name)[call]

    def n_layers(self, part: str) -> int:
        return len(getattr(self.model, part).layers)

    def head(self, kind: Kind | str, layer: int, head: int, query: int) -> HeadComputation:
        kind = Kind.of(kind)  # a kind, where "encoder" alone would name the part
        g = lambda p: self.get(p, kind, layer)[0].float()  # noqa: E731
        q, k, v = g("q")[head, query], g("k")[head], g("v")[head]
        scores, mask = g("scores")[head, query], self.get("mask", kind, layer)[0, 0, query]
        attn = self.attn_module(kind, layer)
        result = self.get("result", kind, layer)[0, query, head].float() if \
            hook_name("result", kind, layer) in self.trace else \
            g("z")[head, query] @ attn.w_o.weight.detach().float().cpu().view(-1, attn.n_heads, attn.d_k)[:, head].T
        n = lambda t: t.numpy().copy()  # noqa: E731
        return HeadComputation(n(q), n(k), n(scores), n(mask), n(scores.masked_fill(~mask, -math.inf)),
                               n(g("pattern")[head, query]), n(v), n(g("z")[head, query]), n(result))

    def attn_module(self, kind: Kind | str, layer: int):
        kind = Kind.of(kind)
        return getattr(getattr(self.model, kind.stack).layers[layer], kind.module)

    def residual_norms(self, part: str) -> ResidualNorms:
        """What each sublayer adds to the residual stream. Pre-norm: differences of the stream. Post-norm
        (every add followed by a LayerNorm): each sublayer's share of the normalised output, LN(x + f(x))
        decomposed with the token's sigma fixed (:mod:`model.analysis.postnorm`), and its raw output f(x)."""
        L, norm = self.n_layers(part), lambda t: t[0].float().norm(dim=-1).numpy()  # noqa: E731
        r = lambda p, i: self.get(p, part, i)  # noqa: E731
        resid = np.stack([norm(r("resid_pre", 0))] + [norm(r("resid_post", i)) for i in range(L)])
        subs = list(SUBLAYERS[part])
        if not self.model.cfg.norm_first:
            share, raw = {s: [] for s in subs}, {s: [] for s in subs}
            for i in range(L):
                for s in subs:
                    d = self.sublayer_shares(part, i, s)
                    share[s].append(d.norms()[:, 1].float().numpy())
                    raw[s].append(d.raw.norm(dim=-1).float().numpy())
            share, raw = ({s: np.stack(v) for s, v in x.items()} for x in (share, raw))
            return ResidualNorms(resid, share["attn"], share.get("cross"), share["ffn"], post_norm=True,
                                 attn_raw=raw["attn"], cross_raw=raw.get("cross"), ffn_raw=raw["ffn"])
        added = {s: np.stack([norm(r(SUBLAYERS[part][s][2], i) - r(SUBLAYERS[part][s][1], i)) for i in range(L)])
                 for s in subs}
        return ResidualNorms(resid, added["attn"], added.get("cross"), added["ffn"])

    def sublayer_output(self, part: str, layer: int, sub: str) -> torch.Tensor:
        """(T, D) float64: what sublayer ``sub`` ("attn", "cross", "ffn") computed from the stream, before
        the residual add, recomputed from the captured z (heads ablated as in the run) or stream."""
        block = getattr(self.model, part).layers[layer]
        with torch.no_grad():
            if sub == "ffn":
                ff = block.ff
                x = self.get(SUBLAYERS[part]["ffn"][1], part, layer)[0].double()
                w1, w2 = (m.weight.detach().double().cpu() for m in (ff.w_1, ff.w_2))
                b1, b2 = (m.bias.detach().double().cpu() for m in (ff.w_1, ff.w_2))
                return F.linear(ff.act(F.linear(x, w1, b1)), w2, b2)
            kind = CROSS if sub == "cross" else (ENC_SELF if part == "encoder" else DEC_SELF)
            attn = self.attn_module(kind, layer)
            z = self.get("z", kind, layer)[0].double()                                  # (H, T, d_k)
            merged = z.transpose(0, 1).reshape(z.size(1), -1)
            return F.linear(merged, attn.w_o.weight.detach().double().cpu(), attn.w_o.bias.detach().double().cpu())

    def sublayer_shares(self, part: str, layer: int, sub: str) -> Decomposed:
        """The stream after sublayer ``sub`` as [the stream before it, what the sublayer added] (+ rest):
        pre-norm x + f(x); post-norm LN(x + f(x)) with the token's sigma fixed, LN's beta in ``rest``."""
        norm_name, before, _ = SUBLAYERS[part][sub]
        x = self.get(before, part, layer)[0].double()
        f = self.sublayer_output(part, layer, sub)
        terms = torch.stack([x, f], 1)
        if self.model.cfg.norm_first:
            return Decomposed(terms, torch.zeros_like(x), x + f, raw=f)
        d = ln_linear(terms, torch.zeros_like(x), getattr(getattr(self.model, part).layers[layer], norm_name))
        return replace(d, raw=f)

    def norm_weights(self, kind: Kind | str, layer: int) -> np.ndarray:
        """(H, Tq, Tk) ||alpha_ij f(x_j)|| with f(x_j) = v_j W_O^h (Kobayashi et al. 2020)."""
        kind = Kind.of(kind)
        attn = self.attn_module(kind, layer)
        v = self.get("v", kind, layer)[0].float()                                 # (H, Tk, d_k)
        w = attn.w_o.weight.detach().float().cpu().view(-1, attn.n_heads, attn.d_k)      # (D, H, d_k)
        fx = torch.einsum("hjk,dhk->hjd", v, w).norm(dim=-1)                       # (H, Tk)
        return (self.get("pattern", kind, layer)[0].float() * fx[:, None, :]).numpy()

    @torch.no_grad()
    def logit_lens(self, k: int = 5) -> LogitLens:
        dec, L = self.model.decoder, self.n_layers("decoder")
        weight = self.model.generator.weight.detach().float().cpu()
        bias = self.model.generator.bias
        norm = dec.norm if isinstance(dec.norm, nn.LayerNorm) else None  # post-norm models have none:
        probs = []  # each layer's output is already normalised, and the last one's lens is the real output
        for i in range(L):
            h = self.get("resid_post", "decoder", i)[0].float()
            if norm is not None:
                h = F.layer_norm(h, norm.normalized_shape, norm.weight.detach().float().cpu(),
                                 norm.bias.detach().float().cpu(), norm.eps)
            logits = h @ weight.T
            probs.append((logits if bias is None else logits + bias.detach().float().cpu()).softmax(-1))
        probs_t = torch.stack(probs)
        tp, ti = probs_t.topk(min(k, probs_t.size(-1)), dim=-1)
        return LogitLens(ti.numpy(), tp.numpy(), probs_t.numpy())

    def embedding_steps(self, part: str) -> EmbeddingSteps:
        scale = self.model.cfg.token_scale
        scaled = self.get("embed", part)[0].float().numpy()
        pos = self.get("pos", part)[0].float().numpy()
        return EmbeddingSteps(scaled / scale, scaled, np.broadcast_to(pos, scaled.shape).copy(), scaled + pos, scale)


# --------------------------------------------------------------------------- forced decoding

@dataclass
class Forced:
    """The model teacher-forced on a reference: the tutorials' cross-entropy, token by token."""
    translation: Translation      # same shape as a decoded Translation; its trace serves every view
    target_tokens: list[str]      # the reference tokens, <eos> included
    prob: np.ndarray              # (T,) probability of each reference token
    loss: np.ndarray              # (T,) cross-entropy (nats)
    top_ids: list[int]            # (T,) the model's own top-1 at each position
    top_tokens: list[str]

    @property
    def perplexity(self) -> float:
        return float(np.exp(self.loss.mean())) if self.loss.size else float("nan")

    @property
    def differs(self) -> list[bool]:
        """Where the model would have chosen another token than the reference."""
        return [a != b for a, b in zip(self.top_ids, self.translation.output_ids)]


def force(lm: LoadedModel, src_text: str, ref_text: str, iv: Interventions = NO_INTERVENTION,
          top_k: int = 5) -> Forced:
    """Teacher-force ``ref_text`` after ``src_text``; raises ValueError on an empty text."""
    if not src_text.strip() or not ref_text.strip():
        raise ValueError("both a source sentence and a reference translation are needed")
    room = lm.model.cfg.max_len - 1
    pieces = lm.tgt_vocab.tokens(ref_text, lm.tgt_lang)
    out_ids = lm.tgt_vocab.encode(pieces[:room - 1]) + [lm.model.cfg.eos_id]
    return force_ids(lm, src_text, out_ids, ref_text, iv, top_k)


def force_ids(lm: LoadedModel, src_text: str, out_ids: list[int], ref_text: str = "",
              iv: Interventions = NO_INTERVENTION, top_k: int = 5) -> Forced:
    """:func:`force` on reference ids (<eos> included when the reference ends)."""
    model = lm.model
    model.validate_interventions(iv)
    src_tokens, truncated = prepare_source(lm, src_text)
    src_ids = lm.src_vocab.encode(src_tokens)  # the frame's specials map to their own ids
    trace = full_trace(lm, src_ids, out_ids, iv)
    with torch.no_grad():  # the logits are opt-in (large); the generator on the final norm gives them
        logits = model.generator(trace[hook_name("norm", "decoder")].to(lm.device))[0].float().cpu()  # (T, V)
    target = torch.tensor(out_ids)
    logp = logits.log_softmax(-1)
    loss = -logp.gather(1, target[:, None])[:, 0]
    out_tokens = lm.tgt_vocab.decode(out_ids)
    top = generable(logits, model.cfg.never_generated).argmax(-1).tolist()  # what decoding would pick
    steps = _forced_steps(trace, logp, out_ids, out_tokens, lm, top_k)
    tr = Translation(src_text, src_tokens, src_ids, out_tokens, out_ids, ref_text, float(-loss.sum()), steps,
                     trace=trace, interventions=iv, truncated=truncated, src_lang=lm.src_lang, tgt_lang=lm.tgt_lang,
                     start_token=start_token(lm))
    return Forced(tr, out_tokens, loss.neg().exp().numpy(), loss.numpy(), top, lm.tgt_vocab.decode(top))


def _forced_steps(trace, logp, out_ids, out_tokens, lm, top_k) -> list[StepRecord]:
    """StepRecords as a decode would give them, the rows read from the teacher-forced trace."""
    self_all = trace.stack("pattern", DEC_SELF).float().numpy()
    cross_all = trace.stack("pattern", CROSS).float().numpy()
    probs = logp.exp()
    steps = []
    for s, tok in enumerate(out_ids):
        tp, ti = probs[s].topk(min(top_k, probs.size(-1)))
        steps.append(StepRecord(s, tok, out_tokens[s], float(probs[s, tok]), ti.tolist(),
                                lm.tgt_vocab.decode(ti.tolist()), tp.tolist(),
                                self_all[:, :, s, :s + 1].copy(), cross_all[:, :, s, :].copy()))
    return steps


__all__ = ["hook_name", "Computation", "HeadComputation", "ResidualNorms", "LogitLens", "EmbeddingSteps",
           "EmbeddingNorms", "Forced", "force", "force_ids"]
