"""Contrastive and target-prefix attribution as the Attribution view and the API show it: the foil choices of
a step, the figure (source and target prefix, one strip with a divider), its caption and the JSON. No gradio."""
from __future__ import annotations

import numpy as np

from model.analysis.attribution import METHODS
from model.analysis.contrast import Contrast, Side, prefix_word_spans
from viz.contrast import source_prefix_attribution

from .inside import METHOD_LABELS
from . import md_escape
from ..state import Run

PREFIX_METHODS = ("alti", "grad_input", "integrated_gradients")   # the methods with target-prefix scores
NOT_CONTRASTIVE = ("attention, rollout, norm-based and ALTI+ say what this position reads, not which token it "
                   "picks: they are the same for any foil")


def foil_choices(run: Run | None, position: int) -> list[tuple[str, str]]:
    """(label, piece) of the step's top-k candidates other than the token chosen there."""
    if run is None or not 0 <= position < len(run.tr.steps):
        return []
    s = run.tr.steps[position]
    return [(f"{t}  (p = {p:.1%})", t) for i, t, p in zip(s.topk_ids, s.topk_tokens, s.topk_probs)
            if i != s.token_id]


def foil_asked(picked, typed) -> str | None:
    """The typed foil wins over the picked one; None when neither is given."""
    for v in (typed, picked):
        if v is not None and str(v).strip():
            return str(v).strip()
    return None


def shown(run: Run, c: Contrast, units: str) -> Contrast:
    """``c`` pooled into words where the Units say so (source words, and the prefix's words so far)."""
    if not run.by_word(units) or run.out_spans is None:
        return c
    spans, words = prefix_word_spans(run.out_spans, run.out_words, c.attribution.position, run.tr.start_token)
    return c.by_word(run.src_spans, run.src_words, spans, words)


def _prefix_scores(prefix: Side, method: str) -> np.ndarray:
    return prefix.integrated.values if method == "integrated_gradients" else getattr(prefix, method)


def question(c: Contrast) -> str:
    a = c.attribution
    if c.foil is None:
        return f"output {a.position} “{a.token}”"
    return f"output {a.position}: “{a.token}” rather than “{c.foil.piece}”"


def figure(c: Contrast):
    a = c.attribution
    scores = {METHOD_LABELS[m]: (a.scores(m), _prefix_scores(c.prefix, m) if m in PREFIX_METHODS else None)
              for m in METHODS}
    notes = [f"gradients of {c.target}", f"ALTI+: {a.source_share:.0%} source, {a.target_share:.0%} prefix",
             "blank: no prefix scores (cross-attention methods)"]
    if c.contrastive:
        notes.append(NOT_CONTRASTIVE)
    return source_prefix_attribution(a.src_tokens, c.prefix.tokens, scores, a.correlations(),
                                     title=f"Why {question(c)}, six ways, over the source and the target prefix",
                                     notes=notes)


def _top(tokens, values, k: int = 3, share: bool = False) -> str:
    order = np.argsort(-np.asarray(values))[:k]
    return ", ".join(f"{md_escape(tokens[i])} {values[i]:.0%}" if share else f"{md_escape(tokens[i])} {values[i]:+.3g}"
                     for i in order)


def completeness(delta: float, total: float, gap: float, tolerance: float, steps: int,
                 token_error: float = float("nan"), token_tolerance: float = float("nan")) -> str:
    """One side's integrated-gradients check, read from the values shown: the sum against f(x) − f(baseline),
    and the largest per-token error estimate against its tolerance (where known)."""
    ok = abs(total - delta) <= tolerance
    text = f"Σ {total:.4g} against {delta:.4g}, gap {gap:.2g} (allowed {tolerance:.2g}, {steps} points)"
    if np.isfinite(token_error) or np.isfinite(token_tolerance):
        per = f"per token ± {token_error:.2g} at most (allowed {token_tolerance:.2g})"
        text = f"{text}, {per}" if token_error <= token_tolerance else f"{text}, ⚠️ **{per}**"
    return text if ok else f"⚠️ **does not add up**: {text}"


def markdown(c: Contrast) -> str:
    a, pre = c.attribution, c.prefix
    if c.foil is None:
        head = (f"Output {a.position} **{md_escape(a.token)}** (p = {c.p_token:.1%}). Gradients of "
                f"**{c.target}**.")
    else:
        head = (f"Output {a.position} **{md_escape(a.token)}** (p = {c.p_token:.1%}) rather than the foil "
                f"**{md_escape(c.foil.piece)}** (p = {c.p_foil:.2%}). Gradients of **{c.target}** "
                f"= {c.p_token - c.p_foil:+.4f}. Only gradient × input and integrated gradients are contrastive: "
                f"{NOT_CONTRASTIVE}." + (f" {md_escape(c.foil.note)}." if c.foil.note else ""))
    ig, rho = pre.integrated, a.correlations()
    i, j, k = METHODS.index("attention"), METHODS.index("alti"), METHODS.index("integrated_gradients")
    fmt = lambda v: "n/a" if np.isnan(v) else f"{v:+.2f}"  # noqa: E731
    src_check = completeness(a.ig_delta, a.ig_sum(), a.ig_gap, a.ig_tolerance, a.ig_steps, a.ig_token_error,
                             a.ig_token_tolerance)
    prefix_check = completeness(ig.delta, float(ig.values.sum()), ig.gap, ig.tolerance, ig.steps, ig.token_error,
                                ig.token_tolerance)
    return (f"{head} Integrated gradients, top source: {_top(a.src_tokens, a.integrated_gradients)}; top prefix: "
            f"{_top(pre.tokens, ig.values)}. ALTI+: source **{a.source_share:.0%}**, target prefix "
            f"**{a.target_share:.0%}** (most: {_top(pre.tokens, pre.alti, share=True)}). Rank correlation (Spearman, over the "
            f"source) of raw attention with ALTI+ {fmt(rho[i, j])}, with integrated gradients {fmt(rho[i, k])}.\n\n"
            f"Completeness (each side from its own zero baseline, the other held): source "
            f"{src_check}; prefix {prefix_check}.")


def payload(c: Contrast, step=None) -> dict:
    """What ``/attribution`` adds to its answer: the target function, the foil, and the prefix scores."""
    ig = c.prefix.integrated
    out = {"target": c.target, "p_token": c.p_token, "p_foil": c.p_foil,
           "foil": None if c.foil is None else {"token": c.foil.piece, "id": c.foil.id, "asked": c.foil.asked,
                                                "note": c.foil.note},
           "contrastive_methods": ["grad_input", "integrated_gradients"] if c.contrastive else [],
           "prefix_tokens": list(c.prefix.tokens),
           "prefix_scores": {m: [float(v) for v in _prefix_scores(c.prefix, m)] for m in PREFIX_METHODS},
           "prefix_ig": {"delta": ig.delta, "sum": float(ig.values.sum()), "steps": ig.steps,
                         "evaluations": ig.evaluations, "gap": ig.gap, "tolerance": ig.tolerance,
                         "converged": bool(abs(float(ig.values.sum()) - ig.delta) <= ig.tolerance),
                         "token_error": ig.token_error, "token_tolerance": ig.token_tolerance}}
    if step is not None:
        out["top_k"] = list(step.topk_tokens)
    return out
