"""Figures of the computation under a run (one head's arithmetic, the residual stream, the logit
lens, attribution, forced decoding, the embedding steps), assembled with ``viz.computation`` from
``model.analysis.computation`` readouts of the run's trace. No gradio here."""
from __future__ import annotations

import numpy as np

from model.analysis.attribution import IG_MAX_STEPS, METHODS, Attribution
from model.analysis.computation import Computation, Forced
from model.engine.results import pool_words
from model.engine.names import HeadRef
from model.engine.transformer import ENC_SELF, Kind
from viz import computation as vc
from viz.common import layer_head, message_figure, step_row_labels

from . import KIND_LABELS, decoder_rows, md_escape, unspaced_caption
from ..state import Run, read_index

FIRST = "Translate a sentence first."
METHOD_LABELS = {"attention": "raw cross-attention", "rollout": "rollout", "norm": "norm-based ‖Σₕ αₕ·fₕ(x)‖",
                 "alti": "ALTI+", "grad_input": "gradient × input", "integrated_gradients": "integrated gradients"}
PARTS = {"encoder": "Encoder", "decoder": "Decoder"}


def computation(run: Run, lm) -> Computation:
    if run.tr.trace is None:
        raise ValueError("this run holds no trace")
    return Computation(run.tr.trace, lm.model, run.tr.interventions)


def query_labels(run: Run, kind: Kind) -> list[str]:
    """One label per query position of ``kind``: source tokens, or ``input→token`` decoder steps."""
    tr = run.tr
    if kind == ENC_SELF:
        return [f"{i}: {t}" for i, t in enumerate(tr.src_tokens)]
    return [f"{i}: {t}" for i, t in enumerate(step_row_labels(tr.decoder_input_tokens, tr.output_tokens))]


def query_choices(run: Run | None, kind: Kind) -> list[tuple[str, int]]:
    return [] if run is None else [(label, i) for i, label in enumerate(query_labels(run, kind))]


def default_query(kind: Kind, n: int) -> int:
    """The query Inside one head opens on: the first, for every kind, so that switching to decoder
    self-attention keeps a query with masked keys (every later position) and the mask step shows them."""
    return 0


def head_figure(run: Run | None, lm, ref: HeadRef, query):
    """Inside one head: q, K, QKᵀ/√d_k, the mask as −∞, softmax, V, αV and the head's output after W_O."""
    if run is None or lm is None:
        return message_figure(FIRST)
    kind, layer, head = ref
    comp = computation(run, lm)
    layer = read_index(layer, 0, comp.n_layers(kind.stack))
    head = read_index(head, 0, lm.model.cfg.heads(kind))
    labels = query_labels(run, kind)
    query = read_index(query, default_query(kind, len(labels)), len(labels))
    h = comp.head(kind, layer, head, query)
    keys = run.tr.axes(kind)[1]
    return vc.head_computation(h.query, h.keys, h.scores, h.mask, h.masked, h.pattern, h.values, h.z, h.result,
                               keys, labels[query].split(": ", 1)[1], lm.model.cfg.d_model // lm.model.cfg.heads(kind),
                               title=f"{KIND_LABELS[kind]}, {layer_head(layer, head)}, query {labels[query]}")


def residual_figure(run: Run | None, lm, part: str, position: int | None = None):
    if run is None or lm is None:
        return message_figure(FIRST)
    part = part if part in PARTS else "decoder"
    r = computation(run, lm).residual_norms(part)
    tokens = run.tr.src_tokens if part == "encoder" else step_row_labels(run.tr.decoder_input_tokens,
                                                                          run.tr.output_tokens)
    title = (f"{PARTS[part]}: the residual stream's norm, and what each sublayer adds" if not r.post_norm else
             f"{PARTS[part]} (post-norm): the stream's norm, and each sublayer's share of it through the "
             "LayerNorm after its residual add (the token's σ fixed)")
    return vc.residual_norms(r.resid, r.attn, r.ffn, r.cross, tokens, title=title, position=position)


def norm_weight_figure(run: Run | None, lm, ref: HeadRef, units: str = "words"):
    """One head's attention beside its norm-based weights ‖α·f(x)‖ (Kobayashi et al. 2020); a subword
    run's pieces pooled into words like the attention maps (keys summed, queries averaged)."""
    if run is None or lm is None:
        return message_figure(FIRST)
    kind, layer, head = ref
    comp = computation(run, lm)
    layer = read_index(layer, 0, comp.n_layers(kind.stack))
    head = read_index(head, 0, lm.model.cfg.heads(kind))
    pattern, norm = run.tr.attention(kind)[layer, head], comp.norm_weights(kind, layer)[head]
    (q, k), outputs, unit = run.tr.axes(kind), run.tr.output_tokens, "tokens"
    notes = [] if lm.model.cfg.norm_first else [POST_NORM_HEAD_NOTE]
    if run.by_word(units):
        words, q, k = run.tr.attention_by_word(lm, kind)
        pattern, norm = words[layer, head], pool_words(norm, *run.tr.word_spans(lm, kind))
        outputs, unit = run.out_words, "words"
        notes.append(unspaced_caption(q, k).removeprefix("; "))
    if kind != ENC_SELF:
        q = decoder_rows(q, outputs)[0]
    title = f"{KIND_LABELS[kind]}, {layer_head(layer, head)}: α beside ‖α·f(x)‖ ({unit})"
    return vc.norm_vs_attention(pattern, norm, q, k, notes=notes, title=title)


# one head's term cannot be put through the LayerNorm of a sum over every head and the residual; the
# whole block's post-LN norms are the attribution's norm-based scores
POST_NORM_HEAD_NOTE = ("post-norm model: ‖α·f(x)‖ is this head's attention term alone, before the residual add "
                       "and the LayerNorm after it")


def lens_figure(run: Run | None, lm, k: int = 5):
    """The logit lens: the decoder's top tokens after each layer, at every step."""
    if run is None or lm is None:
        return message_figure(FIRST)
    lens = computation(run, lm).logit_lens(k)
    vocab = lm.tgt_vocab
    tokens = [[vocab.decode(list(map(int, row))) for row in layer] for layer in lens.top_ids]
    steps = step_row_labels(run.tr.decoder_input_tokens, run.tr.output_tokens)
    return vc.logit_lens(tokens, lens.top_probs, steps, notes=[TIED_NOTE if lm.model.cfg.tie_embeddings else ""],
                         title=lens_title(lm.model.cfg))


def lens_title(cfg) -> str:
    """The mapping the lens applies is the model's own: its final norm if it has one, its logits bias if any."""
    steps = (["the final norm"] if cfg.final_norm else []) + \
        ["the generator" + (" and its logits bias" if cfg.logits_bias else "")]
    tail = "" if cfg.final_norm or cfg.norm_first else " (post-norm: each layer's output is already normalised)"
    return f"Logit lens: {' and '.join(steps)} applied after each decoder layer{tail}"


# Early layers read through tied embeddings name their own input token: the generator is the input
# embedding matrix, and a residual stream that is still mostly that embedding scores highest on it.
TIED_NOTE = ("after layer 0 the top token is often the step's own input, with p≈1: the generator shares the "
             "embedding matrix (tied), and the stream still mostly holds that token's embedding")


POST_NORM_LABELS = {"norm": "norm-based ‖LN(Σₕ αₕ·fₕ(x))‖", "alti": "ALTI+ (post-LN)"}


def method_label(attr: Attribution, method: str) -> str:
    return POST_NORM_LABELS.get(method, METHOD_LABELS[method]) if attr.post_norm else METHOD_LABELS[method]


def attribution_figure(attr: Attribution | None):
    if attr is None:
        return message_figure(FIRST)
    scores = {method_label(attr, m): attr.scores(m) for m in METHODS}
    return vc.attribution_comparison(attr.src_tokens, scores, attr.correlations(), list(scores), attr.token,
                                     attr.source_share,
                                     title=f"Where output {attr.position} “{attr.token}” came from, six ways")


def attribution_table(attr: Attribution) -> list[list]:
    """Rows: source token, then one score per method (the order of ``METHODS``)."""
    return [[tok, *(round(float(attr.scores(m)[i]), 5) for m in METHODS)] for i, tok in enumerate(attr.src_tokens)]


def ig_sentence(attr: Attribution) -> str:
    """What the integrated gradients reached: "add up to" only when they do, a warning otherwise."""
    reached = (f"Σ = {attr.ig_sum():.4g} against f(x) − f(baseline) = {attr.ig_delta:.4g}, gap {attr.ig_gap:.2g} "
               f"(allowed {attr.ig_tolerance:.2g}) with {attr.ig_steps} path points (Gauss–Legendre)")
    if attr.ig_adds_up():
        return f"Integrated gradients add up to f(x) − f(baseline): {reached}."
    return (f"⚠️ **Integrated gradients do not add up**: {reached}; the cap of {IG_MAX_STEPS} points was reached, "
            "so read their scores with care.")


def attribution_markdown(attr: Attribution) -> str:
    rho = attr.correlations()
    i, j, k = METHODS.index("attention"), METHODS.index("alti"), METHODS.index("integrated_gradients")
    fmt = lambda v: "n/a" if np.isnan(v) else f"{v:+.2f}"  # noqa: E731
    return (f"Output {attr.position} **{md_escape(attr.token)}**. ALTI+: the source gives "
            f"**{attr.source_share:.0%}** of this prediction, the target prefix {attr.target_share:.0%}. "
            f"Rank correlation (Spearman) of raw attention with ALTI+ {fmt(rho[i, j])}, with integrated "
            f"gradients {fmt(rho[i, k])}. {ig_sentence(attr)}{POST_NORM_NOTE if attr.post_norm else ''}")


POST_NORM_NOTE = (" This model normalises after each residual add (post-norm): ALTI+ and the norm-based scores "
                  "read each token's term through that LayerNorm with the token's σ fixed (Ferrando et al. 2022; "
                  "Kobayashi et al. 2021); the biases and the norm's β belong to no token.")


def attribution_payload(attr: Attribution) -> dict:
    """The attribution table as plain JSON (the API's answer), with the integrated gradients' check."""
    return {"src_tokens": list(attr.src_tokens), "position": attr.position, "token": attr.token,
            "methods": list(METHODS), "scores": {m: [float(v) for v in attr.scores(m)] for m in METHODS},
            "correlations": [[None if np.isnan(v) else float(v) for v in row] for row in attr.correlations()],
            "source_share": attr.source_share, "target_share": attr.target_share,
            "target_alti": [float(v) for v in attr.target_alti], "ig_delta": attr.ig_delta,
            "ig_sum": attr.ig_sum(), "ig_steps": attr.ig_steps, "ig_evaluations": attr.ig_evaluations,
            "ig_gap": attr.ig_gap, "ig_tolerance": attr.ig_tolerance, "ig_converged": attr.ig_adds_up(),
            "post_norm": attr.post_norm, "ig_token_error": attr.ig_token_error,
            "ig_token_tolerance": attr.ig_token_tolerance}


def position_choices(run: Run | None) -> list[tuple[str, int]]:
    """Output positions, labelled ``i: token``."""
    return [] if run is None else [(f"{i}: {t}", i) for i, t in enumerate(run.tr.output_tokens)]


def forced_figure(forced: Forced | None):
    if forced is None:
        return message_figure("Give a reference translation and press Force.")
    return vc.forced_decoding(forced.target_tokens, forced.prob, forced.loss, forced.top_tokens, forced.differs,
                              title=f"Teacher-forced on the reference: perplexity {forced.perplexity:.2f}")


def forced_markdown(forced: Forced) -> str:
    n, wrong = len(forced.target_tokens), sum(forced.differs)
    return (f"Reference of {n} tokens (with `<eos>`): mean cross-entropy **{float(forced.loss.mean()):.3f}** nats, "
            f"perplexity **{forced.perplexity:.2f}**; the model's own top-1 differs at **{wrong}** of {n} positions "
            "(red bars). This forced run is now the current run: every attention view shows it.")


FORCED_HINT = "The current run was decoded. Give a reference and press Force to teacher-force it."


def forced_view(run: Run | None) -> list:
    """Forced decoding's (markdown, figure) for ``run``: its readout when it is a forced run, else a hint
    (never a previous forced run's)."""
    detail = run.forced_detail if run is not None and run.forced else None
    if detail is None:
        return [FORCED_HINT, message_figure(FORCED_HINT)]
    return [forced_markdown(detail), forced_figure(detail)]


def embedding_figure(run: Run | None, lm, part: str = "encoder", position=0, positional: bool = True):
    """The input as the tutorials build it: embedding, × √d_model, + positional encoding, per position
    (``positional`` False: as a run with positional encoding switched off builds it, nothing added)."""
    if run is None or lm is None:
        return message_figure(FIRST)
    part = part if part in PARTS else "encoder"
    steps = computation(run, lm).embedding_steps(part)
    tokens = run.tr.src_tokens if part == "encoder" else run.tr.decoder_input_tokens
    pos = read_index(position, 0, len(tokens))
    n = steps.norms()
    added, total, n_pos, n_total = steps.pos, steps.total, n.pos, n.total
    if not positional:
        added, total, n_pos, n_total = np.zeros_like(steps.pos), steps.scaled, np.zeros_like(n.pos), n.scaled
    detail = np.stack([steps.token[pos], steps.scaled[pos], added[pos], total[pos]])
    how = "+ positional encoding" if positional else "positional encoding switched off (nothing added)"
    return vc.embedding_steps(tokens, n.token, n.scaled, n_pos, n_total, steps.scale,
                              title=f"{PARTS[part]} input per position: embedding, × √d_model, {how} (L2 norms)",
                              detail=detail, position=pos)
