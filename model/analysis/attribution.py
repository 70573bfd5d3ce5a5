"""Which source tokens an output token came from, by six methods side by side.

- raw cross-attention: one decoder layer's weights, mean over heads;
- rollout (Abnar & Zuidema 2020, model/analysis/profiles.py): mean cross-attention through the encoder rollout;
- norm-based (Kobayashi et al. 2020), multi-head: ||sum_h alpha^h_ij f_h(x_j)|| instead of alpha_ij,
  f_h(x_j) the value vector of head h through its slice of W_O;
- ALTI+ (Ferrando et al. 2022): each attention sublayer's output y_i = sum_j T_i(x_j) (+ residual,
  + bias); token j's share is max(0, ||y_i||_1 - ||y_i - T_i(x_j)||_1), normalised over j. Shares are
  rolled through the encoder, then through the decoder over source and target-prefix tokens. In a
  post-norm model y_i is LN(x_i + attention), decomposed with the token's sigma fixed as ALTI does for
  post-LN encoders (model/analysis/postnorm.py); the biases and LN's beta belong to no token;
- gradient x input and integrated gradients (Sundararajan et al. 2017) on the scaled source token
  embeddings, for the log-probability of the output token, summed over the embedding dimension.
  Integrated gradients are checked as Sundararajan et al. prescribe: a composite Gauss-Legendre rule
  is refined until the scores add up to f(x) - f(baseline) within 1 % (or 1e-3 nats), and until each
  token's own error estimate (what its score changed by against the rule a level coarser) is within
  1 % of the largest score: errors of opposite sign cancel in a sum, and a person reads the bars one by
  one. At most IG_MAX_STEPS path points; the steps used, the gap and the per-token error reached, and
  whether both held travel with them.

All of it for one teacher-forced run (a Translation with its trace) and one output position.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import torch

from model.engine.decoding import Translation
from model.engine.names import Kind
from model.engine.results import decoder_input
from model.engine.transformer import Transformer
from .computation import Computation
from .postnorm import Decomposed, ln_linear
from .profiles import rollout_views

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
    ig_steps: int = 0                 # path points of the integrated gradients' final rule
    ig_evaluations: int = 0           # gradient evaluations spent on them
    ig_gap: float = math.nan          # |sum(integrated_gradients) - ig_delta| reached
    ig_tolerance: float = math.nan    # the gap allowed: max(1 % of |ig_delta|, IG_ATOL)
    ig_converged: bool = False        # the gap and every token's error are within their tolerances
                                      # (False: the cap came first)
    post_norm: bool = False           # the model normalises after each residual add: ALTI+ and the norm
                                      # method read each term through that LayerNorm (model/analysis/postnorm.py)
    ig_token_error: float = math.nan      # the largest per-token error estimate of the integrated gradients
    ig_token_tolerance: float = math.nan  # what it may be: max(1 % of the largest |score|, IG_ATOL)

    def ig_sum(self) -> float:
        return float(np.sum(self.integrated_gradients))

    def ig_adds_up(self) -> bool:
        """Whether the integrated gradients shown add up to f(x) - f(baseline) within the tolerance,
        read from the values themselves (not from the flag the computation set)."""
        return bool(abs(self.ig_sum() - self.ig_delta) <= self.ig_tolerance)

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
    pattern = comp.get("pattern", kind, layer)[0].double()
    ablated = list(comp.interventions.heads(Kind.of(kind), layer))
    if ablated:  # the pattern is captured before the ablation zeroes the head's output
        pattern = pattern.clone()
        pattern[ablated] = 0
    terms = torch.einsum("hij,hjd->ijd", pattern, fx)
    return terms, terms.sum(1) + attn.w_o.bias.detach().double().cpu()


def _shares(terms: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """(Tq, Tk) ALTI contributions, rows non-negative and summing to 1 (uniform if all are 0)."""
    c = (y.abs().sum(-1)[:, None] - (y[:, None, :] - terms).abs().sum(-1)).clamp(min=0)
    total = c.sum(-1, keepdim=True)
    return torch.where(total > 0, c / total.clamp(min=1e-30), torch.ones_like(c) / c.size(1))


def attention_block(comp: Computation, kind: str, layer: int) -> Decomposed:
    """One attention sublayer's output with the residual: per key token for self-attention (the residual
    belongs to the query's own token), per source token plus a last column for the residual for
    cross-attention. Pre-norm: x + attention; post-norm: LN(x + attention) decomposed."""
    terms, y = _token_terms(comp, kind, layer)
    cross, part = comp.attn_module(kind, layer).cross, Kind.of(kind).stack
    x = comp.get("resid_mid" if cross else "resid_pre", part, layer)[0].double()
    if cross:
        terms = torch.cat([terms, x[:, None, :]], 1)
    else:
        terms = terms + _eye(x.size(0))[:, :, None] * x[:, None, :]  # adding 0·x elsewhere changes no number
    bias = comp.attn_module(kind, layer).w_o.bias.detach().double().cpu()
    if comp.model.cfg.norm_first:
        return Decomposed(terms, bias.expand_as(x), y + x)
    block = getattr(comp.model, part).layers[layer]
    return ln_linear(terms, bias.expand_as(x), block.norm_2 if cross else block.norm_1)


def _eye(n) -> torch.Tensor:
    """(n, n) identity in float64, written with sizes only (so that an ONNX export keeps ``n`` dynamic)."""
    i = torch.arange(n)
    return (i[:, None] == i[None, :]).double()


def alti_matrices(comp: Computation) -> tuple[np.ndarray, np.ndarray]:
    """(S, S) encoder ALTI rollout and (T, S + T) decoder contributions over [source; target prefix]."""
    r_enc, r = alti_tensors(comp)
    return r_enc.numpy(), r.numpy()


def alti_tensors(comp: Computation) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`alti_matrices` as float64 tensors, in torch operations only (web/export.py traces it to ONNX)."""
    enc, dec = comp.n_layers("encoder"), comp.n_layers("decoder")
    r_enc = None
    for i in range(enc):
        d = attention_block(comp, "encoder.self_attn", i)
        c = _shares(d.terms, d.output)
        r_enc = c if r_enc is None else c @ r_enc
    S = r_enc.size(0)
    T = comp.get("resid_pre", "decoder", 0).size(1)
    r = torch.cat([torch.zeros(T, S, dtype=torch.float64), _eye(T)], 1)
    for i in range(dec):
        d = attention_block(comp, "decoder.self_attn", i)
        r = _shares(d.terms, d.output) @ r
        d = attention_block(comp, "decoder.cross_attn", i)             # (T, S + 1, D): last, the residual
        c = _shares(d.terms, d.output)
        src = torch.cat([r_enc, torch.zeros(S, T, dtype=torch.float64)], 1)
        r = c[:, :S] @ src + c[:, S:] * r
    return r_enc, r


# --------------------------------------------------------------------------- gradients

IG_RTOL = 0.01          # completeness: |sum IG - delta| within 1 % of |delta| ...
IG_ATOL = 1e-3          # ... or within this many nats, where delta is close to 0
IG_START = 64           # path points of the first rule (the app's and the API's default)
IG_MAX_STEPS = 2048     # most path points of a rule; reaching it without converging is reported
IG_PANEL = 8            # Gauss-Legendre points per panel of the composite rule
IG_BATCH = 128          # path points per forward/backward pass
IG_TOKEN_RTOL = 0.01    # each token's estimated error within 1 % of the largest |score| (or IG_ATOL)
# a panel's tail (its top Legendre coefficients times its half-width) was about five times its real error
# (median over the panels of en->fr's longest test sentence, against a float64 rule of 4,096 points; 1.3 times
# at the 5th percentile): a quarter of it is the estimate
IG_TAIL_RATIO = 4.0


@dataclass
class IntegratedGradients:
    """Integrated gradients (Sundararajan et al. 2017) with the completeness check they prescribe."""
    values: np.ndarray      # per source token
    delta: float            # f(input) - f(baseline), what the values must add up to
    steps: int              # path points of the final quadrature rule
    evaluations: int        # gradient evaluations spent, rejected rules included
    gap: float              # |sum(values) - delta| reached
    tolerance: float        # max(IG_RTOL * |delta|, IG_ATOL)
    converged: bool         # gap <= tolerance and token_error <= token_tolerance (False: the cap came first)
    token_error: float = math.inf      # max over tokens of the estimated error of its value (inf: none known)
    token_tolerance: float = math.nan  # max(IG_TOKEN_RTOL * max |values|, IG_ATOL)


@dataclass
class Gradients:
    grad_input: np.ndarray            # gradient x input per source token
    integrated: IntegratedGradients


@dataclass
class _Panel:
    a: float
    b: float
    values: torch.Tensor    # (S,) the panel's share of the integral, per source token
    err: float = math.inf   # estimated error of its total (inf: not known yet)
    # (S,) signed, per token: half what the parent's value changed by when it was halved (None: never halved).
    # Summed over the panels it is the change between the rule and the one a level coarser everywhere.
    token_err: torch.Tensor | None = None
    # (S,) per token: the integrand's two highest Legendre coefficients on the panel, times its half-width,
    # over IG_TAIL_RATIO. Small where the rule resolves the integrand; large where a narrow spike sits between
    # its nodes, which halving can miss when the halves' nodes miss it too.
    tail: torch.Tensor | None = None


def _log_prob(model: Transformer, emb: torch.Tensor, src: torch.Tensor, dec_in: torch.Tensor,
              position: int, token: int) -> torch.Tensor:
    """log p(token | position) for a batch of scaled source embeddings ``emb`` (B, S, D). The decoder
    reads only inputs 0..position (causal), so the rest is not run."""
    memory, src_mask = encode_embedded(model, emb, src)
    tgt = dec_in[:, : position + 1].expand(emb.size(0), -1)
    h = model.decode(tgt, memory, src_mask, model.tgt_mask(tgt))
    return model.generator(h[:, position]).log_softmax(-1)[:, token]


def encode_embedded(model: Transformer, emb: torch.Tensor, src: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(memory, source mask) of the encoder run on scaled source token embeddings ``emb`` (B, S, D)
    instead of looking them up: what gradients with respect to the source embeddings need."""
    enc = model.encoder
    src_mask = model.src_mask(src).expand(emb.size(0), -1, -1, -1)
    x = emb + enc.pe[: src.size(1)][None].to(emb.dtype)
    for layer in enc.layers:
        x = layer(x, src_mask)
    return enc.norm(x), src_mask


def _path_terms(f, emb: torch.Tensor, alphas: torch.Tensor) -> torch.Tensor:
    """(N, S): grad f(alpha x) . x_j per path point alpha and source token j, in batches."""
    out = []
    for i in range(0, len(alphas), IG_BATCH):
        path = (alphas[i:i + IG_BATCH, None, None] * emb).requires_grad_(True)
        (g,) = torch.autograd.grad(f(path).sum(), path)
        out.append((g * emb).sum(-1))
    return torch.cat(out)


def _null_rules() -> np.ndarray:
    """(2, IG_PANEL): weights that give the integrand's Legendre coefficients of degree IG_PANEL - 2 and
    IG_PANEL - 1 on a panel from its Gauss-Legendre nodes (null rules: zero on every lower-degree polynomial)."""
    x, w = np.polynomial.legendre.leggauss(IG_PANEL)
    return np.stack([(2 * m + 1) / 2 * w * np.polynomial.legendre.legval(x, [0] * m + [1])
                     for m in (IG_PANEL - 2, IG_PANEL - 1)])


def _integrate(f, emb: torch.Tensor, panels: list[tuple[float, float]]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Each panel's (integral, tail) per source token, by IG_PANEL-point Gauss-Legendre (one batched pass);
    the tail is :attr:`_Panel.tail`."""
    x, w = np.polynomial.legendre.leggauss(IG_PANEL)
    nodes = np.concatenate([a + (b - a) * (x + 1) / 2 for a, b in panels])
    half = torch.tensor([(b - a) / 2 for a, b in panels], dtype=emb.dtype, device=emb.device)
    terms = _path_terms(f, emb, torch.tensor(nodes, dtype=emb.dtype, device=emb.device)).view(len(panels), IG_PANEL, -1)
    values = torch.einsum("pns,n->ps", terms, torch.tensor(w, dtype=emb.dtype, device=emb.device)) * half[:, None]
    null = torch.tensor(_null_rules(), dtype=emb.dtype, device=emb.device)
    tails = (torch.einsum("pns,kn->pks", terms, null).abs().sum(1) * half[:, None] / IG_TAIL_RATIO).double()
    return list(zip(values, tails))


def _refine(panels: list[_Panel], gap: float) -> list[_Panel]:
    """The panels to halve: the worst ones, holding most of the estimated error (the integrand is
    rough only in a few narrow stretches of the path); every panel while some estimate is missing, or
    when the estimates do not account for the gap (a feature no estimate has seen yet)."""
    known = sum(p.err for p in panels)
    if not math.isfinite(known) or known < 0.5 * gap:
        return list(panels)
    chosen, covered = [], 0.0
    for p in sorted(panels, key=lambda p: -p.err):
        chosen.append(p)
        covered += p.err
        if covered >= 0.8 * known:
            return chosen
    return chosen


def _halve(f, emb: torch.Tensor, panels: list[_Panel], split: list[_Panel]) -> list[_Panel]:
    """``panels`` with each of ``split`` replaced by its two halves; a half's error estimate, of its total
    and per token, is half the change its parent's value underwent."""
    halves = [h for p in split for h in ((p.a, (p.a + p.b) / 2), ((p.a + p.b) / 2, p.b))]
    new = iter(zip(halves, _integrate(f, emb, halves)))
    replaced = {id(p): [next(new), next(new)] for p in split}
    out = []
    for p in panels:
        if id(p) not in replaced:
            out.append(p)
            continue
        (left, (lv, lt)), (right, (rv, rt)) = replaced[id(p)]
        change = (lv + rv - p.values).double() / 2
        err = abs(float(lv.sum() + rv.sum() - p.values.sum())) / 2
        out += [_Panel(*left, lv, err, change, lt), _Panel(*right, rv, err, change, rt)]
    return out


def _panel_errors(panels: list[_Panel]) -> torch.Tensor:
    """(P, S) each panel's estimated error per token: the halving change, or its tail where that is larger."""
    return torch.maximum(torch.stack([p.token_err.abs() for p in panels]), torch.stack([p.tail for p in panels]))


def _token_errors(panels: list[_Panel]) -> torch.Tensor | None:
    """(S,) each token's estimated error (None while a panel was never halved): how far its value moved from
    the rule one level coarser everywhere (the coarser rule's error, so an over-estimate of this one's), or,
    where larger, the summed tails of the panels whose halving says less than their tail."""
    if any(p.token_err is None for p in panels):
        return None
    change = torch.stack([p.token_err for p in panels])
    tails = torch.stack([p.tail for p in panels])
    return torch.maximum(change.sum(0).abs(), torch.where(tails > change.abs(), tails, 0).sum(0))


def _token_split(panels: list[_Panel], errors: torch.Tensor | None, token_tol: float) -> list[_Panel]:
    """The panels to halve for the per-token check: every panel while one was never halved; else, for each
    token over the tolerance, its panels with the largest changes, holding 80 % of its summed |change|
    (as :func:`_refine` does for the total)."""
    if errors is None:
        return [p for p in panels if p.token_err is None] or list(panels)
    bad = errors > token_tol
    d = _panel_errors(panels)[:, bad]                                               # (P, tokens over)
    ranked, order = d.sort(0, descending=True)
    before = ranked.cumsum(0) - ranked                 # what the panels ranked above each one hold
    take = before < 0.8 * ranked.sum(0, keepdim=True)
    chosen = set(order[take].tolist())
    return [p for i, p in enumerate(panels) if i in chosen]


def integrated_gradients(f, emb: torch.Tensor, delta: float, start: int = IG_START,
                         max_steps: int = IG_MAX_STEPS, atol: float = IG_ATOL) -> IntegratedGradients:
    """IG of ``f`` from the zero baseline to ``emb`` (1, S, D): a composite Gauss-Legendre rule whose
    panels are halved where the integrand is rough, until the values add up to ``delta`` within
    max(IG_RTOL * |delta|, atol) and each token's error estimate is within max(IG_TOKEN_RTOL * the largest
    |value|, atol), or until a rule has ``max_steps`` points (then not converged). ``atol`` is in the
    units of ``f`` (nats for a log-probability)."""
    n = max(1, min(start, max_steps) // IG_PANEL)
    bounds = [(i / n, (i + 1) / n) for i in range(n)]
    panels = [_Panel(a, b, v, tail=t) for (a, b), (v, t) in zip(bounds, _integrate(f, emb, bounds))]
    evaluations, tolerance = n * IG_PANEL, max(IG_RTOL * abs(delta), atol)
    while True:
        values = torch.stack([p.values for p in panels]).sum(0)
        gap = abs(float(values.sum()) - delta)
        token_tol = max(IG_TOKEN_RTOL * float(values.abs().max()), atol)
        errors = _token_errors(panels)
        token_error = math.inf if errors is None else float(errors.max())
        room = max_steps // IG_PANEL - len(panels)  # each halving adds one panel
        if (gap <= tolerance and token_error <= token_tol) or room <= 0:
            break
        split = _token_split(panels, errors, token_tol) if token_error > token_tol else []
        if gap > tolerance:
            split += [p for p in _refine(panels, gap) if all(p is not q for q in split)]
        split = sorted(split, key=lambda p: -p.err)[:room]
        panels = _halve(f, emb, panels, split)
        evaluations += 2 * len(split) * IG_PANEL
    return IntegratedGradients(values=values.detach().cpu().double().numpy(), delta=delta,
                               steps=len(panels) * IG_PANEL, evaluations=evaluations, gap=gap,
                               tolerance=tolerance, converged=gap <= tolerance and token_error <= token_tol,
                               token_error=token_error, token_tolerance=token_tol)


def gradients(model: Transformer, src_ids: list[int], dec_in: list[int], position: int, token: int,
              steps: int = IG_START, max_steps: int = IG_MAX_STEPS) -> Gradients:
    """Per source token: gradient x input, and integrated gradients from the zero (= <pad>) baseline,
    checked for completeness (``steps`` points first, more until they add up, at most ``max_steps``)."""
    if model.training:
        raise ValueError("attribution needs the model in eval mode")
    p = next(model.parameters())
    src = torch.tensor([src_ids], device=p.device)
    dec = torch.tensor([dec_in], device=p.device)
    f = lambda e: _log_prob(model, e, src, dec, position, token)  # noqa: E731
    return side_gradients(f, model.encoder.tok_embed(src) * model.encoder.scale, steps, max_steps)


def side_gradients(f, emb: torch.Tensor, steps: int = IG_START, max_steps: int = IG_MAX_STEPS,
                   atol: float = IG_ATOL) -> Gradients:
    """Gradient x input per token and checked integrated gradients from the zero baseline, for ``f`` of the
    embeddings ``emb`` (1, N, D)."""
    with torch.enable_grad():
        emb = emb.detach().requires_grad_(True)
        fx = f(emb)
        (g,) = torch.autograd.grad(fx.sum(), emb)
        grad_input = (g * emb).sum(-1)[0].detach().cpu().double().numpy()
        emb = emb.detach()
        with torch.no_grad():
            delta = float(fx.detach() - f(torch.zeros_like(emb)))
        ig = integrated_gradients(f, emb, delta, steps, max_steps, atol)
    return Gradients(grad_input=grad_input, integrated=ig)


# --------------------------------------------------------------------------- all together

def cross_norms(comp: Computation, layer: int, position: int) -> np.ndarray:
    """Norm-based attribution (Kobayashi et al. 2020), multi-head: ||sum_h alpha^h_ij f_h(x_j)|| for
    query ``position`` of one cross-attention layer, f_h(x_j) = v^h_j through head h's slice of W_O
    (the output bias is added once to the sum over j, so it belongs to no token). In a post-norm model,
    Kobayashi et al. 2021's form: the norm of that term through the LayerNorm after the residual add,
    the query's sigma fixed (the residual is the decoder's own, no source token's)."""
    if not comp.model.cfg.norm_first:
        S = comp.get("v", "decoder.cross_attn", layer).size(2)
        return attention_block(comp, "decoder.cross_attn", layer).norms()[position, :S].numpy()
    terms, _ = _token_terms(comp, "decoder.cross_attn", layer)                      # (T, S, D), heads summed
    return terms[position].norm(dim=-1).numpy()


def attribute(model: Transformer, tr: Translation, position: int, layer: int = -1,
              ig_steps: int = IG_START, ig_max_steps: int = IG_MAX_STEPS,
              grads: Gradients | None = None) -> Attribution:
    """Every method for output ``position`` of ``tr`` (decoded or forced; its trace must be full).
    Integrated gradients start at ``ig_steps`` path points and take more until they add up. ``grads``:
    source gradients computed by the caller for another target function (then none are computed here)."""
    if tr.trace is None:
        raise ValueError("this run has no trace to attribute")
    T = len(tr.output_ids)
    if not 0 <= position < T:
        raise ValueError(f"output position {position} outside 0..{T - 1}")
    comp = Computation(tr.trace, model, tr.interventions)
    L = comp.n_layers("decoder")
    layer = layer % L
    cross = np.stack([comp.get("pattern", "cross", i)[0].double().numpy() for i in range(L)])
    enc = np.stack([comp.get("pattern", "encoder.self_attn", i)[0].double().numpy()
                    for i in range(comp.n_layers("encoder"))])
    roll = rollout_views(enc, cross).attribution[position]
    _, r = alti_matrices(comp)
    S = len(tr.src_ids)
    dec_in = decoder_input(model.cfg.decoder_start_id, tr.output_ids)
    grads = grads if grads is not None else gradients(model, tr.src_ids, dec_in, position, tr.output_ids[position],
                                                      ig_steps, ig_max_steps)
    ig = grads.integrated
    return Attribution(
        src_tokens=list(tr.src_tokens), position=position, token=tr.output_tokens[position],
        attention=cross[layer, :, position].mean(0), rollout=np.asarray(roll),
        norm=cross_norms(comp, layer, position), alti=r[position, :S], grad_input=grads.grad_input,
        integrated_gradients=ig.values, source_share=float(r[position, :S].sum()),
        target_share=float(r[position, S:].sum()), target_alti=r[position, S:S + position + 1],
        ig_delta=ig.delta, ig_steps=ig.steps, ig_evaluations=ig.evaluations, ig_gap=ig.gap,
        ig_tolerance=ig.tolerance, ig_converged=ig.converged, post_norm=not model.cfg.norm_first,
        ig_token_error=ig.token_error, ig_token_tolerance=ig.token_tolerance)
