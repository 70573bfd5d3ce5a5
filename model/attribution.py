"""Which source tokens an output token came from, by six methods side by side.

- raw cross-attention: one decoder layer's weights, mean over heads;
- rollout (Abnar & Zuidema 2020, model/analysis.py): mean cross-attention through the encoder rollout;
- norm-based (Kobayashi et al. 2020): ||alpha_ij f(x_j)|| instead of alpha_ij, mean over heads;
- ALTI+ (Ferrando et al. 2022): each attention sublayer's output y_i = sum_j T_i(x_j) (+ residual,
  + bias); token j's share is max(0, ||y_i||_1 - ||y_i - T_i(x_j)||_1), normalised over j. Shares are
  rolled through the encoder, then through the decoder over source and target-prefix tokens;
- gradient x input and integrated gradients (Sundararajan et al. 2017) on the scaled source token
  embeddings, for the log-probability of the output token, summed over the embedding dimension.

All of it for one teacher-forced run (a Translation with its trace) and one output position.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import torch

from .analysis import rollout_views
from .computation import Computation
from .decoding import Translation
from .results import decoder_input
from .transformer import Transformer, require_pre_norm

METHODS = ("attention", "rollout", "norm", "alti", "grad_input", "integrated_gradients")


@dataclass
class Attribution:
    """Scores over the source tokens for output position ``position`` (one array per method)."""
    src_tokens: list[str]
    position: int
    token: str
    attention: np.ndarray
    rollout: np.ndarray
    norm: np.ndarray
    alti: np.ndarray                  # ALTI+ share of each source token (sums to source_share)
    grad_input: np.ndarray
    integrated_gradients: np.ndarray
    source_share: float               # ALTI+: the source's share of the prediction
    target_share: float               # ALTI+: the target prefix's share (1 - source_share)
    target_alti: np.ndarray           # ALTI+ share of each target-prefix token (decoder inputs 0..position)
    ig_delta: float                   # f(input) - f(baseline), what integrated gradients must add up to

    def scores(self, method: str) -> np.ndarray:
        if method not in METHODS:
            raise ValueError(f"unknown method {method!r}; expected one of {METHODS}")
        return getattr(self, method)

    def by_word(self, spans: list[list[int]], words: list[str]) -> "Attribution":
        """The same scores over words: a word's score is the sum over its pieces. Every method is additive
        over source tokens (weights, shares, and gradient-based scores that add up to f(x) − f(baseline))."""
        pooled = {m: np.array([self.scores(m)[span].sum() for span in spans]) for m in METHODS}
        return replace(self, src_tokens=list(words), **pooled)

    def correlations(self) -> np.ndarray:
        """(M, M) Spearman rank correlation between the methods, in METHODS order."""
        return np.array([[spearman(self.scores(a), self.scores(b)) for b in METHODS] for a in METHODS])


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman's rho (average ranks for ties); nan when either side is constant."""
    ra, rb = _ranks(np.asarray(a, float)), _ranks(np.asarray(b, float))
    if ra.std() == 0 or rb.std() == 0:
        return float("nan")
    return float(np.corrcoef(ra, rb)[0, 1])


def _ranks(x: np.ndarray) -> np.ndarray:
    order = np.argsort(x, kind="stable")
    ranks = np.empty(len(x))
    ranks[order] = np.arange(len(x), dtype=float)
    for v in np.unique(x):  # ties share their mean rank
        tie = x == v
        ranks[tie] = ranks[tie].mean()
    return ranks


# --------------------------------------------------------------------------- ALTI+

def _token_terms(comp: Computation, kind: str, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
    """T (Tq, Tk, D): what key j adds to query i through every head; y (Tq, D): the module output."""
    attn = comp.attn_module(kind, layer)
    v = comp.get("v", kind, layer)[0].double()                                   # (H, Tk, d_k)
    w = attn.w_o.weight.detach().double().cpu().view(-1, attn.n_heads, attn.d_k)  # (D, H, d_k)
    fx = torch.einsum("hjk,dhk->hjd", v, w)                                        # (H, Tk, D)
    terms = torch.einsum("hij,hjd->ijd", comp.get("pattern", kind, layer)[0].double(), fx)
    return terms, terms.sum(1) + attn.w_o.bias.detach().double().cpu()


def _shares(terms: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """(Tq, Tk) ALTI contributions, rows non-negative and summing to 1 (uniform if all are 0)."""
    c = (y.abs().sum(-1)[:, None] - (y[:, None, :] - terms).abs().sum(-1)).clamp(min=0)
    total = c.sum(-1, keepdim=True)
    return torch.where(total > 0, c / total.clamp(min=1e-30), torch.full_like(c, 1.0 / c.size(1)))


def alti_matrices(comp: Computation) -> tuple[np.ndarray, np.ndarray]:
    """(S, S) encoder ALTI rollout and (T, S + T) decoder contributions over [source; target prefix]."""
    require_pre_norm(comp.model.cfg, "ALTI+ as implemented here (no LayerNorm after the residual add)")
    enc, dec = comp.n_layers("encoder"), comp.n_layers("decoder")
    r_enc = None
    for i in range(enc):
        terms, y = _token_terms(comp, "encoder.self_attn", i)
        x = comp.get("resid_pre", "encoder", i)[0].double()
        terms[torch.arange(len(x)), torch.arange(len(x))] += x       # the residual belongs to token i
        c = _shares(terms, y + x)
        r_enc = c if r_enc is None else c @ r_enc
    S = r_enc.size(0)
    T = comp.get("resid_pre", "decoder", 0).size(1)
    r = torch.cat([torch.zeros(T, S, dtype=torch.float64), torch.eye(T, dtype=torch.float64)], 1)
    for i in range(dec):
        terms, y = _token_terms(comp, "decoder.self_attn", i)
        x = comp.get("resid_pre", "decoder", i)[0].double()
        terms[torch.arange(T), torch.arange(T)] += x
        r = _shares(terms, y + x) @ r
        terms, y = _token_terms(comp, "decoder.cross_attn", i)      # (T, S, D)
        x = comp.get("resid_mid", "decoder", i)[0].double()
        c = _shares(torch.cat([terms, x[:, None, :]], 1), y + x)     # last column: the residual
        src = torch.cat([r_enc, torch.zeros(S, T, dtype=torch.float64)], 1)
        r = c[:, :S] @ src + c[:, S:] * r
    return r_enc.numpy(), r.numpy()


# --------------------------------------------------------------------------- gradients

def _log_prob(model: Transformer, emb: torch.Tensor, src: torch.Tensor, dec_in: torch.Tensor,
              position: int, token: int) -> torch.Tensor:
    """log p(token | position) for a batch of scaled source embeddings ``emb`` (B, S, D)."""
    enc, B = model.encoder, emb.size(0)
    src_mask = model.src_mask(src).expand(B, -1, -1, -1)
    x = emb + enc.pe[: src.size(1)][None].to(emb.dtype)
    for layer in enc.layers:
        x = layer(x, src_mask)
    memory = enc.norm(x)
    tgt = dec_in.expand(B, -1)
    h = model.decode(tgt, memory, src_mask, model.tgt_mask(tgt))
    return model.generator(h[:, position]).log_softmax(-1)[:, token]


def gradients(model: Transformer, src_ids: list[int], dec_in: list[int], position: int, token: int,
              steps: int = 64) -> tuple[np.ndarray, np.ndarray, float]:
    """Per source token: gradient x input, integrated gradients (zero = <pad> baseline, midpoint
    rule over ``steps``), and f(input) - f(baseline)."""
    if model.training:
        raise ValueError("attribution needs the model in eval mode")
    p = next(model.parameters())
    src = torch.tensor([src_ids], device=p.device)
    dec = torch.tensor([dec_in], device=p.device)
    with torch.enable_grad():
        emb = (model.encoder.tok_embed(src) * model.encoder.scale).detach().requires_grad_(True)
        f = _log_prob(model, emb, src, dec, position, token)
        (g,) = torch.autograd.grad(f.sum(), emb)
        grad_input = (g * emb).sum(-1)[0]
        alphas = (torch.arange(steps, device=p.device, dtype=emb.dtype) + 0.5) / steps
        path = (alphas[:, None, None] * emb.detach()).requires_grad_(True)  # baseline: zeros
        (gp,) = torch.autograd.grad(_log_prob(model, path, src, dec, position, token).sum(), path)
        ig = (gp.mean(0) * emb.detach()[0]).sum(-1)
        base = _log_prob(model, torch.zeros_like(emb), src, dec, position, token)
    return (grad_input.detach().cpu().double().numpy(), ig.detach().cpu().double().numpy(),
            float(f.detach() - base.detach()))


# --------------------------------------------------------------------------- all together

def attribute(model: Transformer, tr: Translation, position: int, layer: int = -1, ig_steps: int = 64) -> Attribution:
    """Every method for output ``position`` of ``tr`` (decoded or forced; its trace must be full)."""
    if tr.trace is None:
        raise ValueError("this run has no trace to attribute")
    T = len(tr.output_ids)
    if not 0 <= position < T:
        raise ValueError(f"output position {position} outside 0..{T - 1}")
    comp = Computation(tr.trace, model)
    L = comp.n_layers("decoder")
    layer = layer % L
    cross = np.stack([comp.get("pattern", "cross", i)[0].double().numpy() for i in range(L)])
    enc = np.stack([comp.get("pattern", "encoder.self_attn", i)[0].double().numpy()
                    for i in range(comp.n_layers("encoder"))])
    roll = rollout_views(enc, cross).attribution[position]
    norm = comp.norm_weights("cross", layer)[:, position].mean(0)
    _, r = alti_matrices(comp)
    S = len(tr.src_ids)
    dec_in = decoder_input(model.cfg.decoder_start_id, tr.output_ids)
    gi, ig, delta = gradients(model, tr.src_ids, dec_in, position, tr.output_ids[position], ig_steps)
    return Attribution(list(tr.src_tokens), position, tr.output_tokens[position],
                       cross[layer, :, position].mean(0), np.asarray(roll), norm, r[position, :S], gi, ig,
                       float(r[position, :S].sum()), float(r[position, S:].sum()), r[position, S:S + position + 1],
                       delta)
