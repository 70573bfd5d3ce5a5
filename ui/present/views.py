"""Figures of a run, assembled with ``viz/`` from the engine's readouts. No gradio here.

One convention everywhere: decoder query rows (self- and cross-attention) are labelled
``input→token it produced`` (``viz.common.step_row_labels``) with that said in the axis title;
repeated tokens carry their position; masked cells are drawn dark grey, not as weight 0.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

import numpy as np

from model.analysis import profiles as an
from model.analysis import readouts
from model.engine.config import NO_INTERVENTION, Interventions
from model.engine.decoding import mask_preview, not_padding
from model.engine.names import HeadRef
from model.engine.results import decoder_input, pool_words
from model.engine.transformer import ATTN_KINDS, CROSS, DEC_SELF, ENC_SELF
from model.families import catalog
from model.families.ours import Registry
from viz import alignment as v_align
from viz import attention as va
from viz import beam as v_beam
from viz import masks as vm
from viz import pair as v_pair
from viz import positional as vp
from viz import profiles as v_prof
from viz import rollout as v_roll
from viz import steps as vs
from viz.common import STEP_ROW_TITLE, layer_head, message_figure, step_row_labels

from . import inside
from .align_overlay import overlay_for
from . import KIND_LABELS, decoder_rows, md_escape, unspaced_caption
from ..state import BeamView, CompareRun, PairRun, Run, Selection, read_index

FIRST = "Translate a sentence first."
PE_POSITIONS = 32  # Multi30k sentences are ~13 tokens; more positions cost payload


@dataclass(frozen=True)
class KindView:
    """One attention kind of a run, as the maps draw it: weights L×H×Q×K, row and key labels, which query
    rows are real (not padding), the mask, the rows' axis title and the unit ("words" or "tokens")."""
    attn: np.ndarray
    rows: list
    keys: list
    valid: np.ndarray
    mask: np.ndarray
    row_title: str | None
    unit: str
    caption: str = ""   # what the unit means where it is not obvious (the words of text without spaces)


def kind_view(run: Run, kind: str, units: str, lm, trace=None) -> KindView:
    """One kind of ``run``, pooled into words where the run is a subword run and ``units`` asks for words."""
    tr = run.tr
    if run.by_word(units) and lm is not None:
        attn, q, k = tr.attention_by_word(lm, kind, trace)
        q_tok, k_tok = tr.axes(kind)
        full = np.broadcast_to(tr.mask(kind, trace), (len(q_tok), len(k_tok))).astype(float)
        mask = pool_words(full, *tr.word_spans(lm, kind)) > 0
        outputs, unit = run.out_words, "words"
        caption = unspaced_caption(q, k)
    else:
        attn, (q, k), mask = tr.attention(kind, trace), tr.axes(kind), tr.mask(kind, trace)
        outputs, unit, caption = tr.output_tokens, "tokens", ""
    rows, title = (q, None) if kind == ENC_SELF else decoder_rows(q, outputs)
    return KindView(attn=attn, rows=rows, keys=k, valid=not_padding(q), mask=mask, row_title=title, unit=unit,
                    caption=caption)



def error_figure(what: str = "view"):
    """The one figure a view shows in place of a stack trace: "This {what} could not be drawn."."""
    return message_figure(f"This {what} could not be drawn.")

def attention_figure(run: Run | None, ref: HeadRef, view: str, units: str = "words", lm=None, scale: str = "shared"):
    """``ref``'s kind in ``view`` ('grid', 'head', 'mean' or 'scores'); 'head' and 'scores' show ``ref`` itself."""
    if run is None or run.tr.trace is None:
        return message_figure(FIRST)
    if view == "scores":
        return scores_figure(run, ref)
    kind, layer, head = ref
    kv = kind_view(run, kind, units, lm)
    attn, q, k, valid, mask, q_title, unit = kv.attn, kv.rows, kv.keys, kv.valid, kv.mask, kv.row_title, kv.unit
    label = KIND_LABELS[kind]
    L, H = attn.shape[:2]
    l, h = read_index(layer, 0, L), read_index(head, 0, H)
    axes = f"rows: query {unit}, columns: key {unit}"
    words = [kv.caption.removeprefix("; ")] if kv.caption else []  # a subtitle: the title keeps one line
    if view == "head":
        return va.single_head(attn[l, h], q, k, query_valid=valid, mask=mask, scale=scale, kind=kind, layer=l,
                              head=h, query_title=q_title, label=layer_head(l, h),
                              title=f"{label}: {layer_head(l, h)}", notes=[axes, *words])
    if view == "mean":
        return va.layer_means(attn, q, k, query_valid=valid, mask=mask, scale=scale, kind=kind, query_title=q_title,
                              title=f"{label}: mean over heads per layer ({axes})", notes=words)
    return va.head_grid(attn, q, k, query_valid=valid, mask=mask, scale=scale, kind=kind, query_title=q_title,
                        title=f"{label}: every layer × head; click a panel to open that head ({axes})", notes=words)


def unmasked_title(kind: str, mask) -> str | None:
    """The mask panel's name where it masks nothing: why it repeats the scores."""
    if kind == DEC_SELF or mask is None or not np.asarray(mask, bool).all():
        return None
    where = "cross-attention" if kind == CROSS else "the encoder"
    return f"the same scores: {where} masks only padding, and this run has none"


def scores_figure(run: Run | None, ref: HeadRef):
    """One head's scaled scores, the scores with the mask applied, and the softmax (tokens, not words)."""
    if run is None or run.tr.trace is None:
        return message_figure(FIRST)
    kind, layer, head = ref
    tr = run.tr
    attn = tr.attention(kind)
    l, h = read_index(layer, 0, attn.shape[0]), read_index(head, 0, attn.shape[1])
    q, k = tr.axes(kind)
    rows, q_title = (q, None) if kind == ENC_SELF else decoder_rows(q, tr.output_tokens)
    mask = tr.mask(kind)
    return va.score_panels(tr.scores(kind, l)[h], attn[l, h], rows, k, mask=mask, mask_title=unmasked_title(kind, mask),
                           query_valid=tr.query_valid(kind), query_title=q_title, label=layer_head(l, h),
                           title=f"{KIND_LABELS[kind]}, {layer_head(l, h)}: QKᵀ/√d_k → mask → softmax (tokens)")


# --------------------------------------------------------------------------- generation

def step_figures(run: Run | None, t, head=None):
    """(markdown, prefix chips, source strip, top-k, cross rows, self rows) of step ``t``."""
    if run is None or not run.tr.steps:
        msg = message_figure(FIRST)
        return FIRST, [], msg, msg, msg, msg
    tr = run.tr
    sv = tr.step_view(t or 0)
    special = ("<unk>", "<pad>", "<bos>", "<eos>")
    prefix = [(tok, "special" if tok in special else "token") for tok in sv.prefix[:-1]] + [(sv.prefix[-1], "input")]
    prefix.append((sv.token, "new"))
    md = (f"**Step {sv.t} of 0–{sv.n - 1}** (steps count from 0). The decoder reads the {len(sv.prefix)} token(s) "
          f"on the left and produces **{md_escape(sv.token)}** with probability {sv.prob:.1%}.")  # <eos> is not a tag
    if sv.t < tr.prefix_len:  # a branch's forced step: the bars are what the model would have chosen
        own = next((tok for tok in sv.topk_tokens if tok not in ("<bos>", "<pad>")), sv.topk_tokens[0])
        steps = "step 0" if tr.prefix_len == 1 else f"steps 0–{tr.prefix_len - 1}"
        md += (f" This token was **forced** (the branch's prefix, {steps}); the bars show what the model itself "
               f"preferred: it would have written **{own}**.")
    row_label = step_row_labels(tr.decoder_input_tokens, tr.output_tokens)[sv.t]
    topk = vs.topk_bars(sv.topk_tokens, sv.topk_probs, sv.chosen,
                        title=f"Top-{len(sv.topk_tokens)} next tokens at step {sv.t}")
    cross_w, src, over = sv.cross, tr.src_tokens, "the source"
    if run.src_spans is not None:  # subword model: a source word's weight is the sum over its pieces
        cross_w = pool_words(cross_w[..., None, :], [[0]], run.src_spans)[..., 0, :]
        src, over = run.src_words, "the source words"
    h = None if head in (None, "", "mean") else read_index(head, 0, cross_w.shape[1])
    weights = cross_w[-1].mean(0) if h is None else cross_w[-1, h]
    what = "last layer, mean over heads" if h is None else f"last layer, head {h}"
    strip = vs.source_strip(weights, src, what=what, per_row=6, key_valid=not_padding(src),
                            title=f"Step {sv.t} ({row_label}) looks at {over}")
    cross = vs.step_rows(cross_w, src, what="cross-attention", query_label=row_label, key_valid=not_padding(src),
                         title=f"Cross-attention of step {sv.t} over {over}, every layer and head")
    self_ = vs.step_rows(sv.self_, sv.prefix, what="self-attention", highlight_key=len(sv.prefix) - 1,
                         query_label=row_label, title=f"Decoder self-attention of step {sv.t} over the prefix")
    return md, prefix, strip, topk, cross, self_


def watch_strip(run: Run, t: int) -> list[tuple[str, float]]:
    """HighlightedText value: the source words shaded by step t's last-layer cross-attention (mean of heads)."""
    sv = run.tr.step_view(t)
    w = sv.cross[-1].mean(0)
    src = run.tr.src_tokens
    if run.src_spans is not None:
        w = np.array([w[s].sum() for s in run.src_spans])
        src = run.src_words
    top = float(w.max()) if w.size and w.max() > 0 else 1.0
    return [(tok, round(float(x) / top, 3)) for tok, x in zip(src, w) if tok != "<pad>"]


def watch_heads(run: Run, t: int | None = None, selected: tuple[int, int] | None = None, units: str = "words"):
    """Every head's cross-attention over the rows decoded so far (all rows when ``t`` is None); the
    selected (layer, head) outlined. In words (a subword run): source pieces summed into words, and a
    row per output word (the mean of its decoded pieces' rows), as every other map shows them."""
    tr = run.tr
    cross = tr.attention(CROSS)
    n = cross.shape[2]
    t = n if t is None else max(1, min(int(t), n))
    if selected is not None:
        selected = (read_index(selected[0], 0, cross.shape[0]), read_index(selected[1], 0, cross.shape[1]))
    title = "Cross-attention of every head as it is generated (click a panel to open it)"
    if run.by_word(units) and run.out_spans is not None:
        spans = [[i for i in span if i < t] for span in run.out_spans]
        spans = [s for s in spans if s]
        rows = pool_words(cross[:, :, :t], spans, run.src_spans)
        words = list(run.out_words)
        inputs = [tr.start_token, *words[:-1]]
        return vs.heads_mini(rows, run.src_words, step_row_labels(inputs, words), n_rows=len(words), kind=CROSS,
                             height=260, selected=selected, title=title, unit="words")
    labels = step_row_labels(tr.decoder_input_tokens, tr.output_tokens)
    return vs.heads_mini(cross[:, :, :t], tr.src_tokens, labels, n_rows=n, kind=CROSS, height=260,
                         selected=selected, title=title, unit="pieces" if run.src_spans is not None else "tokens")


# --------------------------------------------------------------------------- masks and interventions

def masks_figure(reg: Registry, model: str, src_tokens, out_tokens, iv: Interventions, title: str):
    return model_masks_figure(reg.models[model], src_tokens, out_tokens, iv, title)


def model_masks_figure(lm, src_tokens, out_tokens, iv: Interventions, title: str, width_px: int = 1200):
    m = mask_preview(lm, src_tokens, out_tokens, iv)
    dec_in = m.decoder_input
    rows = step_row_labels(dec_in, list(out_tokens)) if out_tokens else dec_in
    return vm.mask_panels([
        ("source padding mask (encoder self-attn)", m.padding, src_tokens, src_tokens),
        ("causal mask", m.causal, rows, dec_in),
        ("combined decoder self-attn mask", m.combined, rows, dec_in),
        ("cross-attention mask", m.cross, rows, src_tokens),
    ], title=title, width_px=width_px)


def compare_maps_figure(cmp: CompareRun | None, ref: HeadRef | None, lm=None):
    """Baseline, modified and difference maps of one head; a subword ``lm`` pools pieces into words.
    ``ref`` None: no attention map comes after the ablated heads (see :func:`ablation_map`)."""
    if cmp is None:
        return message_figure("Press Compare to run the baseline and the modified model.")
    if ref is None:
        return message_figure(NO_MAP_AFTER)
    kind, layer, head = ref
    run = _base_run(cmp, lm)
    base = kind_view(run, kind, "words", lm)
    mod = kind_view(run, kind, "words", lm, trace=cmp.mod_on_base)
    L, H = base.attn.shape[:2]
    l, h = read_index(layer, 0, L), read_index(head, 0, H)
    own = (kind, l, h) in cmp.iv.ablate_heads
    return va.comparison_maps(base.attn[l, h], mod.attn[l, h], base.rows, base.keys, query_valid=base.valid,
                              masks=(base.mask, mod.mask), query_title=base.row_title,
                              title=f"{KIND_LABELS[kind]}, {layer_head(l, h)}" +
                                    (" (ablated: its own pattern cannot change)" if own else "") +
                                    f": baseline, modified and their difference (same decoder input; {base.unit})")


NO_MAP_AFTER = ("No attention map comes after the ablated head (it is in the decoder's last layer): "
                "its effect is on the next-token probabilities, in the chart above.")
OWN_PATTERN = ("An ablated head's own pattern cannot change: ablation zeroes the head's output, which is "
               "computed after its pattern.")


@dataclass(frozen=True)
class MapChoice:
    """The map that shows an ablation's effect; ``kind`` None when no attention map comes after it."""
    kind: str | None
    layer: int
    head: int
    why: str


def _base_run(cmp: CompareRun, lm) -> Run:
    return Run.of(lm, cmp.model, cmp.base) if lm is not None else Run(cmp.model, cmp.base)


def computation_order(n_enc: int, n_dec: int) -> list[tuple[str, int]]:
    """Every attention map in the order the forward pass computes them."""
    order = [(ENC_SELF, l) for l in range(n_enc)]
    for l in range(n_dec):
        order += [(DEC_SELF, l), (CROSS, l)]
    return order


def ablation_map(cmp: CompareRun, lm) -> MapChoice:
    """The first attention map after the earliest ablated head whose weights change, and its head that
    changes most (maps of the modified model teacher-forced on the baseline output, so rows line up)."""
    cfg = lm.model.cfg
    order = computation_order(cfg.n_encoder_layers, cfg.n_decoder_layers)
    first = min(order.index((k, l)) for k, l, _ in cmp.iv.ablate_heads)
    run = _base_run(cmp, lm)
    for kind, layer in order[first + 1:]:
        base = kind_view(run, kind, "words", lm).attn[layer]
        mod = kind_view(run, kind, "words", lm, trace=cmp.mod_on_base).attn[layer]
        change = np.nan_to_num(np.abs(mod - base)).max(axis=(1, 2))
        if change.max() > 1e-6:
            head = int(change.argmax())
            return MapChoice(kind, layer, head, f"{KIND_LABELS[kind].lower()}, layer {layer}, head {head}: the "
                                                f"first map after the ablated head that changes (its largest change "
                                                f"in that layer, {change.max():.2f})")
    k, l, h = min(cmp.iv.ablate_heads, key=lambda t: order.index(t[:2]))
    return MapChoice(None, l, h, "none: " + NO_MAP_AFTER[0].lower() + NO_MAP_AFTER[1:])


def probability_figure(cmp: CompareRun):
    base, mod = cmp.base, cmp.mod
    return vs.step_probabilities([("baseline", base.output_tokens, [s.prob for s in base.steps]),
                                  ("modified", mod.output_tokens, [s.prob for s in mod.steps])],
                                 title="Probability of the chosen token at each step")


# --------------------------------------------------------------------------- encodings

def positional_figures(reg: Registry, model: str, n_pos, dims_text: str):
    if model not in reg.models:
        msg = message_figure("No model loaded.")
        return msg, msg, msg, msg
    if model not in reg.pe:
        reg.models[model]  # noqa: B018  an added model's table comes with its first load
    pe = reg.pe[model]
    n = max(2, min(int(n_pos or PE_POSITIONS), pe.shape[0]))
    sub = pe[:n]
    dims = [int(d) for d in re.findall(r"\d+", dims_text or "")][:12] or [0, 1, 4, 5, 10, 11]
    variants = an.pe_variants(n, pe.shape[1])
    d_show = min(pe.shape[1], 64)
    layout = reg.models[model].model.cfg.pos_layout
    compared = "Interleaved sin/cos (the model's) vs sin-only vs cos-only"
    if layout == "halves":  # Marian: every sine, then every cosine; the paper's layout beside it
        variants = {"sin | cos halves (the model's)": sub, **variants}
        compared = "The model's sin | cos halves vs the paper's interleaved sin/cos, sin-only and cos-only"
    return (vp.encoding_heatmap(sub, title=f"The model's positional encoding: first {n} positions × "
                                           f"{pe.shape[1]} dimensions", layout=layout),
            vp.encoding_curves(sub, dims, title="Chosen dimensions over positions", layout=layout),
            vp.similarity_matrix(sub, title="Cosine similarity between positions"),
            vp.scheme_comparison({k: v[:, :d_show] for k, v in variants.items()},
                                 title=f"{compared} (first {d_show} dimensions)"))


# --------------------------------------------------------------------------- analysis views

def rollout_view_figure(run: Run | None, layer_sel, units: str = "words"):
    if run is None or run.tr.trace is None:
        return message_figure(FIRST)
    tr = run.tr
    n_dec = tr.attention(CROSS).shape[0]
    layer = None if layer_sel in (None, "", "all") else read_index(layer_sel, 0, n_dec)
    d = readouts.rollout_data(tr, layer)
    which = "mean over every layer and head" if layer is None else f"layer {layer}, mean over heads"
    roll, attr, src, out, dec_in = d.rollout, d.attribution, tr.src_tokens, tr.output_tokens, \
        tr.decoder_input_tokens
    if run.by_word(units):  # keys summed, queries averaged over a word's pieces
        roll = pool_words(roll, run.src_spans, run.src_spans)
        attr = pool_words(attr, run.out_spans, run.src_spans)
        src, out, dec_in = run.src_words, run.out_words, decoder_input("<bos>", run.out_words)
        which += "; pieces pooled into words" + unspaced_caption(src)
    rows, title = decoder_rows(dec_in, out)
    return v_roll.rollout_figure(roll, attr, src, rows, formula=an.ROLLOUT_FORMULA, src_valid=not_padding(src).tolist(),
                                 out_title=title, title=f"Attention rollout; cross-attention c_t: {which}")


ALIGN_MODES = ("head", "layer", "mean", "rollout")


def alignment_view_figure(run: Run | None, mode, layer, head, units: str = "words", overlay=None):
    """``overlay`` (align_overlay.Overlay): reference links drawn over the lines, or the caption's reason why not."""
    if run is None or run.tr.trace is None:
        return message_figure(FIRST)
    tr = run.tr
    L, H = tr.attention(CROSS).shape[:2]
    mode = mode if mode in ALIGN_MODES else "layer"
    l, h = read_index(layer, 0, L), read_index(head, 0, H)
    w = readouts.alignment_data(tr, mode, l, h)
    what = {"head": f"cross-attention, {layer_head(l, h)}", "layer": f"cross-attention, layer {l}, mean of heads",
            "mean": "cross-attention, mean of every layer and head", "rollout": "rollout attribution"}[mode]
    src, out, dec_in = tr.src_tokens, tr.output_tokens, tr.decoder_input_tokens
    if run.by_word(units):  # keys summed, queries averaged over a word's pieces
        w = pool_words(w, run.out_spans, run.src_spans)
        src, out, dec_in = run.src_words, run.out_words, decoder_input("<bos>", run.out_words)
        what += "; pieces pooled into words" + unspaced_caption(src, out)
    rows, title = decoder_rows(dec_in, out)
    # rollout spreads every row over the whole source: only its strongest lines stay readable
    return v_align.alignment_lines(w, src, rows, what="weight", out_title=title or "output",
                                   row_share=0.7 if mode == "rollout" else 0.1,
                                   reference=overlay.links if overlay else (), notes=[overlay.note] if overlay else [],
                                   title=f"Alignment lines ({what}); hover a token to highlight its lines")


def beam_view_figure(view: BeamView | None):
    if view is None:
        return message_figure("Open this view after translating to see the beam search.")
    tree = view.tree
    return v_beam.beam_tree_figure(tree.nodes, v_beam.tree_layout(tree.nodes), length_penalty=tree.length_penalty,
                                   title=f"Beam search tree: {len(tree.nodes) - 1} hypotheses explored, "
                                         f"{len(tree.finished)} finished")


def profiles_view_figure(rows, stat, label: str = ""):
    if not rows:
        return message_figure("No head profiles yet.")
    stat = stat if stat in an.STATS else an.STATS[0]
    grids = [(KIND_LABELS[k], an.profile_grid(list(rows), k, stat)) for k in ATTN_KINDS]
    return v_prof.profile_heatmaps(grids, stat, kinds=list(ATTN_KINDS),
                                   title=f"{v_prof.STAT_LABELS[stat]} per layer × head{label}; click a cell to "
                                         "open that head")


def head_map_figure(run: Run | None, head_label, lm=None):
    if run is None or run.tr.trace is None:
        return message_figure("Translate a sentence to see a head's map.")
    if not head_label:
        return message_figure("Pick a head (or click a cell or a row).")
    return attention_figure(run, HeadRef.parse(head_label), "head", "words", lm, scale="head")


def pair_view_figure(pair: PairRun | None, ref: HeadRef, units: str = "words", lm=None):
    """Both sentences' maps of one head on one colour scale, in words where ``units`` asks for them and the
    model (``lm``) reads subwords, else in tokens."""
    if pair is None:
        return message_figure("Enter two sentences and press Compare sentences.")
    kind, layer, head = ref
    maps, valid, masks = [], [], []
    l = h = 0
    unit = "tokens"
    for label, tr in (("sentence A", pair.a), ("sentence B", pair.b)):
        kv = kind_view(Run.of(lm, pair.model, tr), kind, units, lm) if lm is not None else \
            kind_view(Run(pair.model, tr), kind, "tokens", None)
        l, h = read_index(layer, 0, kv.attn.shape[0]), read_index(head, 0, kv.attn.shape[1])
        maps.append((f"{label}: {tr.text[:60]}", kv.attn[l, h], kv.rows, kv.keys))
        valid.append(kv.valid)
        masks.append(kv.mask)
        unit = kv.unit
    return v_pair.side_by_side(maps, query_valid=valid, masks=masks,
                               query_title=None if kind == ENC_SELF else STEP_ROW_TITLE,
                               title=f"{KIND_LABELS[kind]}, {layer_head(l, h)}: both sentences on one colour scale "
                                     f"(in {unit})")


def hypothesis_figure(hyp, rank):
    kind = CROSS
    attn = hyp.attention(kind)
    rows, q_title = decoder_rows(*hyp.axes(kind)[:1], hyp.output_tokens)
    return va.layer_means(attn, rows, hyp.axes(kind)[1], query_valid=hyp.query_valid(kind), query_title=q_title,
                          kind=kind, title=f"Hypothesis #{rank}: cross-attention, mean over heads per layer "
                                           "(teacher-forced on this hypothesis)")


# --------------------------------------------------------------------------- the registry of views

@dataclass(frozen=True)
class Env:
    """What a view draws with beside the run and the selection: the run's model (None without one) and the
    app's registry key (for a view that reads files beside the checkpoints)."""
    lm: object = None
    reg_key: str = ""


@dataclass(frozen=True)
class Control:
    """A view's own control, declared without Gradio (``mount`` builds it where the section does not hand
    it one): a "radio", "dropdown" or "slider" with its choices (or (low, high) for a slider)."""
    name: str
    widget: str
    value: object = None
    choices: tuple = ()
    label: str = ""


@dataclass(frozen=True)
class Out:
    """One of a view's outputs, declared without Gradio: a "plot" or a "markdown", in ``draw``'s order."""
    widget: str = "plot"
    elem_id: str | None = None
    label: str = ""


@dataclass(frozen=True)
class View:
    """One view of the screen, defined once: where it is (section, sub-view), the Selection fields it
    reads, its own controls (by name: ``draw`` takes them as keywords), and ``draw(run, sel, env, **own)``,
    which returns its output, or a list of them in order. ``model_call``: drawing it runs the model (the
    model's concurrency group). ``api_name``: where the API serves it. ``outputs`` declared (with ``label``,
    the tab's name): ``mount`` lays the view out itself; empty: its section lays it out and hands them.
    ``draw`` None: a view its section draws (a model call the section makes), still stamped."""
    section: str
    subview: str
    reads: frozenset
    draw: Callable | None = None
    controls: tuple = ()   # names, or Control declarations where mount builds them
    model_call: bool = False
    api_name: str | None = None
    outputs: tuple = ()    # Out declarations where mount builds them
    label: str = ""

    @property
    def name(self) -> str:
        return f"{self.section}/{self.subview}" if self.subview else self.section

    @property
    def control_names(self) -> tuple:
        return tuple(c.name if isinstance(c, Control) else c for c in self.controls)


ViewSpec = View  # the name tests and older code know


def view(section: str, subview: str, reads: str = "", draw=None, **kw) -> View:
    """A View with its fields read as one space-separated string ("kind layer head")."""
    return View(section, subview, frozenset(reads.split()), draw, **kw)


_spec = view


def _alignment(run, sel, env, mode="head"):
    return alignment_view_figure(run, mode, sel.layer, sel.head, sel.units, overlay_for(env.reg_key, run, sel.units))


REGISTRY: dict[str, View] = {s.name: s for s in (
    view("translate", "", "", lambda run, sel, env: watch_heads(run)),
    view("attention", "maps", "kind layer head units view scale",
         lambda run, sel, env: attention_figure(run, sel.head_ref, sel.view, sel.units, env.lm, sel.scale)),
    view("attention", "alignment", "layer head units", _alignment, controls=("mode",), api_name="alignment_view"),
    view("attention", "rollout", "units", lambda run, sel, env, layer="all": rollout_view_figure(run, layer, sel.units),
         controls=("layer",), api_name="rollout_view"),
    view("generation", "steps", "step", lambda run, sel, env: list(step_figures(run, sel.step)[2:]),
         api_name="open_generation"),
    view("generation", "beam-tree", "", model_call=True, api_name="beam_tree"),
    view("interventions", "", "", lambda run, sel, env: model_masks_figure(
        env.lm, run.tr.src_tokens, run.tr.output_tokens, NO_INTERVENTION, ""), api_name="open_interventions"),
    view("computation", "encodings", "", lambda run, sel, env: inside.embedding_figure(run, env.lm),
         api_name="open_computation"),  # the section's first sub-view
    view("computation", "inside", "kind layer head query",
         lambda run, sel, env: inside.head_figure(run, env.lm, sel.head_ref, sel.query), api_name="inside_view"),
    view("computation", "residual", "kind layer head units",
         lambda run, sel, env: inside.norm_weight_figure(run, env.lm, sel.head_ref, sel.units),
         api_name="residual_view"),
    view("computation", "lens", "", lambda run, sel, env: inside.lens_figure(run, env.lm), api_name="lens_view"),
    view("computation", "attribution", "units", model_call=True, api_name="attribution_view"),
    view("computation", "forced", "", lambda run, sel, env: list(inside.forced_view(run)),
         api_name="forced_result_view"),
    view("computation", "decoderlens", "", model_call=True, api_name="decoderlens_view"),  # a call per layer
    view("analysis", "profiles", "kind layer head", model_call=True, api_name="head_profiles"),  # its picker: that head
    view("analysis", "pair", ""),
    view("analysis", "export", ""),
    view("analysis", "about", ""),
    view("analysis", "sidebyside", "kind layer head units scale", model_call=True, api_name="sidebyside_view"),  # a second model's run
    view("analysis", "corpus", "", api_name="corpus_view"),  # a corpus output folder's results: drawn by its section, not from the run
    view("learn", "", ""),    # its curves follow the run (a refresher); the head-forming map is on demand
)}


def register(v: View) -> View:
    """``v`` in the registry (a view added in a file of its own); its sub-view joins its section's list."""
    from ..state import SUBVIEWS
    REGISTRY[v.name] = v
    if v.subview not in SUBVIEWS.setdefault(v.section, ("",)):
        SUBVIEWS[v.section] = (*SUBVIEWS[v.section], v.subview)
    return v


def stamp_of(name: str, run: Run | None, sel: Selection) -> tuple:
    """What view ``name`` shows: the run's id and the values of the fields it reads. A view whose
    stamp differs from the one it was drawn with is stale."""
    spec = REGISTRY[name]
    return (run.id if run is not None else "", *(getattr(sel, f) for f in sorted(spec.reads)))


__all__ = ["attention_figure", "scores_figure", "step_figures", "watch_strip", "watch_heads", "masks_figure",
           "compare_maps_figure", "probability_figure", "positional_figures", "rollout_view_figure",
           "alignment_view_figure", "beam_view_figure", "profiles_view_figure", "head_map_figure",
           "pair_view_figure", "hypothesis_figure", "NO_INTERVENTION", "REGISTRY", "View", "ViewSpec", "Env", "Control",
           "Out", "view", "register", "stamp_of"]


def warm_up(reg_key: str) -> None:
    """One short translation and one of each figure per model, so the first visitor does not pay for
    spaCy, lazy imports and first-call allocations. Runs in a background thread after start-up."""
    import logging
    import traceback

    from model.engine.decoding import DecodeOptions

    from .. import calls
    from .payload import EVERYDAY
    reg = calls.REGISTRIES[reg_key]
    try:
        for name, lm in catalog.loaded(reg).items():  # an added model loads on first use, not here
            text = EVERYDAY.get(lm.src_lang, ["a b"])[0]
            run = Run(name, calls.gpu_translate(reg_key, name, text, DecodeOptions(max_len=3)))
            figs = [attention_figure(run, HeadRef(k, 0, 0), v) for k in ATTN_KINDS for v in ("grid", "head", "mean", "scores")]
            figs += list(step_figures(run, 0)[2:]) + [watch_heads(run), masks_figure(
                reg, name, run.tr.src_tokens, run.tr.output_tokens, NO_INTERVENTION, "")]
            for fig in figs:
                fig.to_json()
    except Exception:  # never fatal: the first request just pays the cost instead
        logging.getLogger("attention-explorer").warning("warm-up failed: %s", traceback.format_exc())
