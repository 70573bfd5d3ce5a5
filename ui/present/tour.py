"""The guided tour's stops, written from the current run's own numbers (no gradio here).

Eleven stops in the order the tutorials teach the Transformer: tokens and embeddings, positional
encoding, one head's scores and softmax, many heads, the masks, feed-forward and the residual stream,
cross-attention as alignment, one decoding step, what moved the output, how the model learned it (its
training frames, where they ship), and the whole run. Each stop
is a :class:`Stop`: the selection it points at (what "leave the tour" opens), at most four sentences
built from the run's values, the figure it is about, one thing to try and, once tried, what changed.
Every number a sentence states is also kept as a :class:`Fact` (tests compare it with the engine).
Layers, heads and steps are counted from 0 here as everywhere in the explorer.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from functools import cached_property

import numpy as np

from model.analysis import readouts
from model.analysis.attribution import alti_matrices
from model.analysis.computation import Computation
from model.engine.config import NO_INTERVENTION, Interventions
from model.engine.decoding import DecodeOptions
from model.engine.names import CROSS, DEC_SELF, ENC_SELF, HeadRef
from viz import attention as va
from viz import masks as vm
from viz import tour as vt

from viz.common import message_figure
from viz.learning import Curve, curves_figure

from .. import calls
from . import inside, learn, views
from . import PIECE_NOTE, direction_label, md_escape
from ..state import TOUR_STOPS, BeamView, Run, Selection, read_index

SPECIAL = ("<bos>", "<eos>", "<pad>", "<unk>", "<s>", "</s>")
TITLES = ("Tokens and embeddings", "Positional encoding", "One head: scores → softmax", "Many heads",
          "Padding and look-ahead masks", "Feed-forward and the residual stream", "Cross-attention as alignment",
          "One decoding step", "What moved the output", "Watch it learn", "The whole run")
N_STOPS = len(TITLES)
TOUR_PLOT_PX = 780  # about the width of the tour's figure column on a desktop
assert N_STOPS == TOUR_STOPS, "a link names stops 1..TOUR_STOPS"


@dataclass(frozen=True)
class Fact:
    """A number a stop's text states, under a name tests read (``value`` as computed, before rounding)."""
    name: str
    value: float


@dataclass(frozen=True)
class Trial:
    """The one thing a stop offers to try: a labelled choice, the default first."""
    label: str
    choices: tuple[tuple[str, str], ...]
    value: str | None = None    # what the stop shows (None: the first choice)

    @property
    def default(self) -> str:
        return self.value if self.value is not None else self.choices[0][1]


@dataclass
class Stop:
    index: int                  # 0-based; shown as "stop index + 1 of N_STOPS"
    title: str
    sentences: list[str]        # at most four, markdown
    focus: Selection            # what the full explorer opens on when the tour is left here
    trial: Trial
    figure: object = None       # a plotly figure (viz)
    facts: list[Fact] = field(default_factory=list)
    model: str | None = None    # the model the view shows where the trial picked another (a training frame)

    @property
    def heading(self) -> str:
        return f"Stop {self.index + 1} of {N_STOPS}: {self.title}"

    def fact(self, name: str) -> float:
        return next(f.value for f in self.facts if f.name == name)


@dataclass
class TourRun:
    """The run a tour reads, with its model and the units the selection shows (words or pieces)."""
    run: Run
    lm: object
    units: str = "words"
    reg_key: str = ""

    @cached_property
    def comp(self) -> Computation:
        return inside.computation(self.run, self.lm)

    @property
    def tr(self):
        return self.run.tr

    @property
    def by_word(self) -> bool:
        return self.run.by_word(self.units)

    def src_axis(self) -> tuple[list[str], list[list[int]]]:
        """Source labels (words or tokens) and the token indices under each."""
        if self.by_word:
            return list(self.run.src_words), [list(s) for s in self.run.src_spans]
        return list(self.tr.src_tokens), [[i] for i in range(len(self.tr.src_tokens))]

    def out_axis(self) -> tuple[list[str], list[list[int]]]:
        """Output labels (words or tokens) and the step indices under each."""
        if self.by_word and self.run.out_spans is not None:
            return list(self.run.out_words), [list(s) for s in self.run.out_spans]
        return list(self.tr.output_tokens), [[i] for i in range(len(self.tr.output_tokens))]

    def content_src(self) -> int:
        """The first source token that is not a special (the tour's default example token)."""
        toks = self.tr.src_tokens
        return next((i for i, t in enumerate(toks) if t not in SPECIAL), 0)

    def opts(self, beam: int = 1) -> DecodeOptions:
        max_len = self.run.inputs.max_len if self.run.inputs is not None else 100
        return DecodeOptions(beam=beam, max_len=max_len)


# Every sentence of the stops the browser edition computes too, with named slots: the app fills them here,
# the page fills the same templates (exported by web/build.py) with the numbers it computes. A slot is
# {name} or {name:format}: md (escaped), em (an escaped token in italics), pct, or a Python number format.
SAY = {
    "tokens_enter": "“{src:md}” enters the encoder as {n} tokens: {shown}.",
    "piece_note": PIECE_NOTE,
    "tokens_lookup": "Each token looks up a row of {d} numbers in the embedding table, and the model {how}.",
    "tokens_how_sqrt": "multiplies it by √{d} = {scale:.2f}",
    "tokens_how": "multiplies it by {scale:.2f}",
    "tokens_grows": "So {token:em} (position {i}) grows from length {token_norm:.2f} to {scaled_norm:.2f}.",
    "positions_why": "Attention alone does not see order, so the model adds a position vector to each scaled "
                     "embedding.",
    "positions_at": "At position {i}, {token:em}'s vector (length {scaled_norm:.2f}) gets a position vector of "
                    "length {pos_norm:.2f}; the sum, the first layer's input, has length {total_norm:.2f}.",
    "positions_off_at": "With positional encoding switched off nothing is added: at position {i}, {token:em} enters "
                        "the first layer as its scaled embedding alone (length {scaled_norm:.2f}).",
    "positions_off_other": "The same word at position {j} would now enter the encoder exactly as it does here: the "
                           "encoder sees which words there are, not their order.",
    "positions_other": "Position {j} gets another position vector: the same word there would enter the encoder "
                       "differently.",
    "head_score": "Head 0 of encoder layer 0 (both counted from 0) lets {query:em} compare its query with every "
                  "token's key: the score is q·k / √{d_k} = q·k / {sqrt_dk:.2f}.",
    "head_range": "The highest score, {top_score:.2f}, goes to {top:em}; the lowest, {low_score:.2f}, to {low:em}.",
    "head_softmax": "Softmax turns the scores into weights that sum to 1: {top:em} gets {top_weight:pct}.",
    "head_output": "The head's output is the weighted mean of the values, one vector per query.",
    "heads_side": "Encoder layer {layer} (counted from 0) runs {n} heads side by side, each on its own slice of "
                  "{d_k} numbers with its own queries and keys.",
    "heads_item": "head {h} on {key:em} ({weight:pct})",
    "heads_more": ", and {n} more heads",
    "heads_look": "Reading from {query:em}, they look at different places: {listed}{more}.",
    "heads_join": "Their outputs are joined and mixed by one matrix (W_O) back into {d} numbers.",
    "masks_what": "The padding mask hides the {pad:md} tokens that fill a batch to one length (this run has "
                  "{pads}); the look-ahead mask stops the decoder from reading tokens it has not written yet.",
    "masks_off_step": "With the look-ahead mask off, the decoder at step {step}, writing {token:em}, may read all "
                      "{n} positions, {later} of them not written yet.",
    "masks_off_weight": "On this output, forced, the weight on later positions, summed over every decoder layer, "
                        "head and row, is {future:.3f}: {share:pct} of the decoder's self-attention.",
    "masks_step": "At step {step}, writing {token:em}, the decoder reads {read} of the {n} positions; the other "
                  "{later} are hidden.",
    "masks_weight": "In this run the weight on later positions, summed over every decoder layer, head and row, is "
                    "{future:.3f}.",
    "masks_tried": "**What changed:** with the mask off, {share:pct} of the decoder's self-attention on this "
                   "output goes to tokens after the one being written (none with it on). {decoded}",
    "changed_same": "**What changed:** {what} the model still writes “{text:md}”.",
    "changed_other": "**What changed:** {what} the model writes “{other:md}” instead of “{text:md}” ({same} of "
                     "{n} tokens unchanged at their place).",
    "masks_decoding": "Decoding that way,",
    "positions_without": "Without positional encoding",
    "tried_pick": "**What changed:** the stop now shows {now:md} instead of {was:md}; its text and figure are "
                  "redrawn for it.",
    "residual_sum": "Each of the {L} decoder layers adds three things to a running sum, the residual stream: "
                    "self-attention, cross-attention and a feed-forward network ({d} → {d_ff} → {d}) applied to "
                    "each position alone.",
    "residual_length": "At input {token:em} (position {i}) the stream's length goes from {resid_in:.2f} to "
                       "{resid_out:.2f} after the last layer.",
    "residual_largest": "The largest {verb} there is layer {layer}'s {what} (length {length:.2f}).",
    "cross_what": "Each decoder layer's cross-attention lets the word being written read the encoder's output, "
                  "the source {unit}.",
    "cross_peak": "At the step that reads {reads:em} and writes {out:em}, head {h} of decoder layer {l} (counted "
                  "from 0) puts {weight:pct} of its weight on {key:em}.",
    "cross_aligner": "A head like this behaves as a word aligner; many heads do not, and the tour's map shows the "
                     "difference.",
    "step_scores": "At step {step} the decoder's last vector goes through one linear layer to {V:,} scores, one "
                   "per vocabulary token, and softmax turns them into probabilities.",
    "step_item": "{token:em} {p:pct}",
    "step_top": "The top three: {top}.",
    "step_beam": "Greedy decoding took {token:em} here; beam search keeps the {beams} most probable partial "
                 "translations at every step, {n} hypotheses in all on this sentence, and picks the best whole one.",
    "step_greedy": "Greedy decoding takes the most probable token at every step (here {token:em}); beam search "
                   "keeps several partial translations and picks the best whole one.",
    "moved_mix": "To write {token:em} at step {step}, the model mixed the source with the tokens it had already "
                 "written.",
    "moved_alti": "ALTI+ follows every contribution through every layer: {source:pct} came from the source, "
                  "{prefix:pct} from the output so far.",
    "moved_top": "The source {unit} that moved it most is {key:em} ({share:pct}).",
    "moved_hidden": "With {key:em} hidden, the model writes {said:em} at step {at}, and {key:em}'s share is "
                    "{share:pct}.",
    "moved_hide": "hide {key} from the decoder",
    "moved_hidden_what": "With {key:em} hidden from the cross-attention,",
    "moved_title": "What moved {token:repr} at step {step} (ALTI+ shares)",
    "moved_title_hidden": "What moved {token:repr} at step {at} with {key:repr} hidden (ALTI+ shares)",
    "moved_prefix": "output so far",
    "whole_run": "“{src:md}” → “{text:md}”: {n_src} source tokens through {enc_layers} encoder layers, then "
                 "{n} decoding steps (0–{last}) through {dec_layers} decoder layers of {heads} heads each.",
    "whole_sure": "The model was surest at step {hi} ({hi_token:em}, {hi_p:pct}) and least sure at step {lo} "
                  "({lo_token:em}, {lo_p:pct}).",
    "whole_step": "At step {j} it wrote {token:em} with probability {p:pct}.",
    "whole_leave": "Leave the tour to open the full explorer on this run, or type another sentence and walk it "
                   "again.",
}
# the words the residual stop's last sentence uses for what a layer adds (pre-norm) or its share (post-norm)
RESIDUAL_VERBS = {"pre": "addition", "post": "share of the normalised stream"}
SUBLAYER_NAMES = ("self-attention", "cross-attention", "feed-forward")  # the decoder's additions, in order
SLOT = re.compile(r"\{(\w+)(?::([^{}]*))?\}")


def fill(template: str, /, **slots) -> str:
    """``template`` with its slots filled; the page's tour.js fills the same way."""
    def one(m: re.Match) -> str:
        value, spec = slots[m[1]], m[2] or ""
        shown = {"": str, "md": md_escape, "em": em, "pct": pct, "repr": repr}.get(spec)
        return shown(value) if shown else format(value, spec)
    return SLOT.sub(one, template)


def say(name: str, /, **slots) -> str:
    return fill(SAY[name], **slots)


def em(token: str) -> str:
    """A token or word in italics, escaped (``<eos>`` must stay visible)."""
    return f"*{md_escape(token.strip() or token)}*"


def pct(x: float) -> str:
    return f"{100 * x:.1f} %"


def clip(text: str, n: int) -> str:
    """``text`` in at most ``n`` characters, cut after a whole word with "…" (a word longer than ``n``: cut)."""
    if len(text) <= n:
        return text
    head = text[:n - 1]
    cut = head.rsplit(None, 1)[0] if " " in head.strip() and not text[n - 1].isspace() else head
    return cut.rstrip(" ,;:") + "…"


def _pos_choices(labels: list[str], skip_special: bool = True) -> tuple[tuple[str, str], ...]:
    return tuple((f"{i}: {t}", str(i)) for i, t in enumerate(labels) if not (skip_special and t in SPECIAL)) \
        or tuple((f"{i}: {t}", str(i)) for i, t in enumerate(labels))


# --------------------------------------------------------------------------- stops 1-2: the input

def stop_tokens(t: TourRun, choice: str | None = None) -> Stop:
    steps = t.comp.embedding_steps("encoder")
    n, toks = steps.norms(), t.tr.src_tokens
    i = read_index(choice, t.content_src(), len(toks))
    d = t.lm.model.cfg.d_model
    scaled = math.isclose(steps.scale, math.sqrt(d), rel_tol=1e-4)
    how = say("tokens_how_sqrt" if scaled else "tokens_how", d=d, scale=steps.scale)
    shown = " ".join(md_escape(x) for x in toks[:24]) + (" …" if len(toks) > 24 else "")
    s = [say("tokens_enter", src=clip(t.tr.src_text, 120), n=len(toks), shown=shown),
         say("piece_note") if any(str(x).startswith("▁") for x in toks) else "",
         say("tokens_lookup", d=d, how=how),
         say("tokens_grows", token=toks[i], i=i, token_norm=n.token[i], scaled_norm=n.scaled[i])]
    return Stop(0, TITLES[0], [x for x in s if x], Selection(kind=ENC_SELF, section="computation",
                                                              subview="encodings", units=t.units),
                Trial("Pick another token", _pos_choices(toks), str(i)),
                inside.embedding_figure(t.run, t.lm, "encoder", i),
                [Fact("scale", steps.scale), Fact("norm_token", float(n.token[i])),
                 Fact("norm_scaled", float(n.scaled[i]))])


def stop_positions(t: TourRun, choice: str | None = None) -> Stop:
    """Positional encoding; with ``choice`` "off", the input drawn as the run without it gets it (no position
    vector: the first layer's input is the scaled embedding)."""
    steps = t.comp.embedding_steps("encoder")
    n, toks, off = steps.norms(), t.tr.src_tokens, choice == "off"
    i = min(t.content_src() + 1, len(toks) - 1)
    j = min(i + 1, len(toks) - 1)
    s = [say("positions_why")]
    if off:
        total = float(n.scaled[i])
        s += [say("positions_off_at", i=i, token=toks[i], scaled_norm=total), say("positions_off_other", j=j)]
    else:
        total = float(n.total[i])
        s += [say("positions_at", i=i, token=toks[i], scaled_norm=n.scaled[i], pos_norm=n.pos[i], total_norm=total),
              say("positions_other", j=j)]
    return Stop(1, TITLES[1], s, Selection(kind=ENC_SELF, section="computation", subview="encodings", units=t.units),
                Trial("Try it", (("positional encoding on", "on"), ("switch positional encoding off", "off"))),
                inside.embedding_figure(t.run, t.lm, "encoder", i, positional=not off),
                [Fact("norm_pos", 0.0 if off else float(n.pos[i])), Fact("norm_total", total)])


def tried_positions(t: TourRun, choice: str) -> str:
    if choice != "off":
        return ""
    other = calls.gpu_translate(t.reg_key, t.run.model, t.tr.src_text, t.opts(),
                                Interventions(positional_encoding=False))
    return _changed(SAY["positions_without"], t.tr, other)


def _changed(what: str, base, other) -> str:
    if other.output_tokens == base.output_tokens:
        return say("changed_same", what=what, text=base.text)
    same = sum(a == b for a, b in zip(base.output_tokens, other.output_tokens))
    return say("changed_other", what=what, other=other.text, text=base.text, same=same, n=len(base.output_tokens))


# --------------------------------------------------------------------------- stops 3-4: attention heads

def stop_one_head(t: TourRun, choice: str | None = None) -> Stop:
    toks = t.tr.src_tokens
    q = read_index(choice, t.content_src(), len(toks))
    h = t.comp.head(ENC_SELF, 0, 0, q)
    d_k = t.lm.model.cfg.d_model // t.lm.model.cfg.n_heads
    ok = np.where(h.mask)[0]
    top, low = int(ok[np.argmax(h.scores[ok])]), int(ok[np.argmin(h.scores[ok])])
    s = [say("head_score", query=toks[q], d_k=d_k, sqrt_dk=math.sqrt(d_k)),
         say("head_range", top_score=h.scores[top], top=toks[top], low_score=h.scores[low], low=toks[low]),
         say("head_softmax", top=toks[top], top_weight=h.pattern[top]),
         say("head_output")]
    return Stop(2, TITLES[2], s, Selection(kind=ENC_SELF, layer=0, head=0, query=q, section="computation",
                                           subview="inside", units=t.units),
                Trial("Pick another query token", _pos_choices(toks), str(q)),
                inside.head_figure(t.run, t.lm, HeadRef(ENC_SELF, 0, 0), q),
                [Fact("top_score", float(h.scores[top])), Fact("top_weight", float(h.pattern[top])),
                 Fact("query", q), Fact("top_key", top)])


def _heads_of_layer(t: TourRun, layer: int, q: int) -> list[tuple[int, str, float]]:
    """(head, key label, weight) of each head's largest weight for query ``q`` (in the units shown)."""
    keys, spans = t.src_axis()
    attn = t.tr.attention(ENC_SELF)[layer][:, q]                       # (H, S)
    pooled = np.stack([attn[:, s].sum(-1) for s in spans], -1)         # (H, words)
    return [(h, keys[int(np.argmax(row))], float(row.max())) for h, row in enumerate(pooled)]


def _word_of(t: TourRun, q: int) -> str:
    """Source piece ``q`` in the units shown: the word it is part of (its keys are words too), else the piece."""
    keys, spans = t.src_axis()
    return next((k for k, s in zip(keys, spans) if q in s), t.tr.src_tokens[q])


def stop_many_heads(t: TourRun, choice: str | None = None) -> Stop:
    n_layers = t.lm.model.cfg.n_encoder_layers
    layer = read_index(choice, 0, n_layers)
    q = t.content_src()
    rows = _heads_of_layer(t, layer, q)
    d_k = t.lm.model.cfg.d_model // t.lm.model.cfg.n_heads
    listed = "; ".join(say("heads_item", h=h, key=k, weight=w) for h, k, w in rows[:4])
    more = say("heads_more", n=len(rows) - 4) if len(rows) > 4 else ""
    s = [say("heads_side", layer=layer, n=len(rows), d_k=d_k),
         say("heads_look", query=_word_of(t, q), listed=listed, more=more),
         say("heads_join", d=t.lm.model.cfg.d_model)]
    return Stop(3, TITLES[3], s, Selection(kind=ENC_SELF, layer=layer, view="grid", section="attention",
                                           subview="maps", units=t.units),
                Trial("Pick another layer", tuple((f"layer {i}", str(i)) for i in range(n_layers)), str(layer)),
                _layer_figure(t, layer), [Fact(f"head{h}_weight", w) for h, _, w in rows])


def _layer_figure(t: TourRun, layer: int):
    """The picked layer's heads, each its own panel (a phone stacks them, each as wide as the screen)."""
    kv = views.kind_view(t.run, ENC_SELF, t.units, t.lm)
    return va.layer_heads(kv.attn[layer], kv.rows, kv.keys, layer=layer, kind=ENC_SELF, query_valid=kv.valid,
                          mask=kv.mask, query_title=kv.row_title, width_px=TOUR_PLOT_PX,
                          title=f"Encoder self-attention, layer {layer}: its {kv.attn.shape[1]} heads side by side "
                                f"(rows: query {kv.unit}, columns: key {kv.unit})")


# --------------------------------------------------------------------------- stops 5-6: masks, FFN, residual

def _mask_off(t: TourRun):
    """The run's own output, forced through the model with the look-ahead mask off (one cached compare):
    (the base decode, the decode without the mask, the forced trace)."""
    return calls.gpu_compare(t.reg_key, t.run.model, t.tr.src_text, t.opts(), Interventions(causal_mask=False))


def later_weight(trace) -> tuple[float, float]:
    """The decoder self-attention's weight on later positions, summed over layers, heads and rows, and its
    share of all that attention's weight."""
    a = trace.attention(DEC_SELF)                                       # (L, H, T, T)
    n = a.shape[-1]
    later = np.arange(n)[:, None] < np.arange(n)[None, :]
    future = float(a[..., later].sum()) if n > 1 else 0.0
    return future, future / max(1e-9, float(a.sum()))


def stop_masks(t: TourRun, choice: str | None = None) -> Stop:
    """The masks; with ``choice`` "off", drawn from the run with the look-ahead mask off (text and figure)."""
    tr, off = t.tr, choice == "off"
    trace = _mask_off(t)[2] if off else tr
    n = len(tr.output_tokens)
    step = min(max(1, n // 2), n - 1)
    future, share = later_weight(trace)
    pads = sum(1 for x in tr.src_tokens if x == "<pad>")
    s = [say("masks_what", pad="<pad>", pads=pads)]
    token = tr.output_tokens[step]
    if off:
        s += [say("masks_off_step", step=step, token=token, n=n, later=n - step - 1),
              say("masks_off_weight", future=future, share=share)]
    else:
        s += [say("masks_step", step=step, token=token, read=step + 1, n=n, later=n - step - 1),
              say("masks_weight", future=future)]
    return Stop(4, TITLES[4], s, Selection(kind=DEC_SELF, step=step, section="interventions", units=t.units),
                Trial("Try it", (("both masks on", "on"), ("switch the look-ahead mask off", "off")),
                      "off" if off else None),
                masks_figure(t, off), [Fact("future_weight", future), Fact("future_share", share), Fact("pads", pads)])


def masks_figure(t: TourRun, off: bool):
    """What each attention may read on this run, with the look-ahead mask on or ``off`` (no model call)."""
    iv = Interventions(causal_mask=False) if off else NO_INTERVENTION
    return views.model_masks_figure(t.lm, t.tr.src_tokens, t.tr.output_tokens, iv,
                                    "What each attention may read" + (", look-ahead mask off" if off else "") +
                                    f" ({vm.BLOCKED_NAME}: hidden by a mask, {vm.ATTEND_NAME}: read)",
                                    width_px=TOUR_PLOT_PX)


def tried_masks(t: TourRun, choice: str) -> str:
    if choice != "off":
        return ""
    base, mod, forced = _mask_off(t)
    _, share = later_weight(forced)
    decoded = _changed(SAY["masks_decoding"], base, mod).removeprefix("**What changed:** ")
    return say("masks_tried", share=share, decoded=decoded)


def stop_residual(t: TourRun, choice: str | None = None) -> Stop:
    r = t.comp.residual_norms("decoder")
    labels = t.tr.decoder_input_tokens
    i = read_index(choice, min(1, len(labels) - 1), len(labels))
    L = r.resid.shape[0] - 1
    adds = list(zip(SUBLAYER_NAMES, (r.attn, r.cross, r.ffn)))
    best = max(((name, l, float(x[l, i])) for name, x in adds if x is not None for l in range(L)), key=lambda z: z[2])
    verb = RESIDUAL_VERBS["post" if r.post_norm else "pre"]
    cfg = t.lm.model.cfg
    s = [say("residual_sum", L=L, d=cfg.d_model, d_ff=cfg.d_ff),
         say("residual_length", token=labels[i], i=i, resid_in=r.resid[0, i], resid_out=r.resid[-1, i]),
         say("residual_largest", verb=verb, layer=best[1], what=best[0], length=best[2])]
    return Stop(5, TITLES[5], s, Selection(kind=DEC_SELF, step=i, section="computation", subview="residual",
                                           units=t.units),
                Trial("Pick another decoder position", _pos_choices(labels, skip_special=False), str(i)),
                inside.residual_figure(t.run, t.lm, "decoder", i),
                [Fact("resid_in", float(r.resid[0, i])), Fact("resid_out", float(r.resid[-1, i])),
                 Fact("largest", best[2])])


# --------------------------------------------------------------------------- stops 7-9: the decoder's choices

def peak_cross(t: TourRun, layer: int | None = None, head: int | None = None) -> tuple[int, int, int, int, float]:
    """(layer, head, output unit, source unit, weight) of the sharpest cross-attention weight on a
    non-special source unit while writing a non-special output unit (in the units shown)."""
    keys, kspans = t.src_axis()
    outs, ospans = t.out_axis()
    a = t.tr.attention(CROSS)                                                    # (L, H, T, S)
    rows = np.stack([a[:, :, s].mean(2) for s in ospans], 2)                     # queries averaged
    w = np.stack([rows[..., s].sum(-1) for s in kspans], -1)                     # keys summed
    w = w.copy()
    w[:, :, [i for i, o in enumerate(outs) if o in SPECIAL]] = -1
    w[..., [j for j, k in enumerate(keys) if k in SPECIAL]] = -1
    if layer is None or head is None:  # the sharpest head: the largest mean over outputs of its peak weight
        sharp = np.where(w.max(-1) >= 0, w.max(-1), 0.0)
        counted = np.maximum((w.max(-1) >= 0).sum(-1), 1)  # no content unit written (an empty run): head 0
        layer, head = np.unravel_index(int(np.argmax(sharp.sum(-1) / counted)), sharp.shape[:2])
    o, k = np.unravel_index(int(np.argmax(w[layer, head])), w.shape[2:])
    return int(layer), int(head), int(o), int(k), float(w[layer, head, o, k])


def reads(t: TourRun, o: int) -> str:
    """What the decoder reads at the first step of output unit ``o``: the unit written before it."""
    return t.out_axis()[0][o - 1] if o > 0 else t.tr.start_token


def stop_cross(t: TourRun, choice: str | None = None) -> Stop:
    best = peak_cross(t)
    H = t.lm.model.cfg.n_heads
    head = read_index(choice, best[1], H) if choice not in (None, "") else best[1]
    l, h, o, k, w = peak_cross(t, best[0], head)
    keys, outs = t.src_axis()[0], t.out_axis()[0]
    unit = "words" if t.by_word else "tokens"
    s = [say("cross_what", unit=unit),
         say("cross_peak", reads=reads(t, o), out=outs[o], h=h, l=l, weight=w, key=keys[k]),
         say("cross_aligner")]
    return Stop(6, TITLES[6], s, Selection(kind=CROSS, layer=l, head=h, view="head", section="attention",
                                           subview="maps", units=t.units),
                Trial("Pick another head of that layer", tuple((f"head {i}", str(i)) for i in range(H)), str(h)),
                views.attention_figure(t.run, HeadRef(CROSS, l, h), "head", t.units, t.lm),
                [Fact("weight", w), Fact("layer", l), Fact("head", h), Fact("out", o), Fact("src", k)])


def decoding_step(t: TourRun) -> int:
    """The step the tour's decoding stops look at: the first step of the output word stop 7 found."""
    _, _, o, _, _ = peak_cross(t)
    return t.out_axis()[1][o][0] if t.tr.output_tokens else 0


def stop_step(t: TourRun, choice: str | None = None) -> Stop:
    step = decoding_step(t)
    rec = t.tr.steps[step]
    top = ", ".join(say("step_item", token=x, p=p) for x, p in zip(rec.topk_tokens[:3], rec.topk_probs[:3]))
    s = [say("step_scores", step=step, V=t.lm.model.cfg.tgt_vocab_size), say("step_top", top=top),
         say("step_greedy", token=rec.token)]
    fig = views.step_figures(t.run, step)[3]
    if choice == "beam":  # the search itself: every hypothesis the 4 beams explored
        tree = readouts.beam_tree_data(t.lm, _beam(t), BEAMS)
        fig = views.beam_view_figure(BeamView(t.run.model, _beam(t), tree, t.run.id))
        s[-1] = say("step_beam", token=rec.token, beams=BEAMS, n=len(tree.nodes) - 1)
    return Stop(7, TITLES[7], s, Selection(step=step, section="generation", subview="steps", units=t.units),
                Trial("Try it", (("greedy", "greedy"), (f"beam search, {BEAMS} beams", "beam"))), fig,
                [Fact("top_prob", float(rec.topk_probs[0])), Fact("chosen_prob", float(rec.prob))])


BEAMS = 4  # stop 8's beam size


def _beam(t: TourRun):
    """The run's sentence decoded by beam search (cached: the stop's figure and its "what changed" share it)."""
    max_len = t.run.inputs.max_len if t.run.inputs is not None else 100
    return calls.gpu_beam(t.reg_key, t.run.model, t.tr.src_text, BEAMS, max_len)


def tried_step(t: TourRun, choice: str) -> str:
    if choice != "beam":
        return ""
    return _changed(f"With beam search ({BEAMS} beams)", t.tr, _beam(t))


_ALTI: dict[tuple[str, str], np.ndarray] = {}  # (model, run id) -> ALTI+ rows: a second of CPU per run
_ALTI_KEEP = 64


def alti_rows(t: TourRun) -> np.ndarray:
    """ALTI+ over [source; output prefix] for every output step of the run, computed once per run."""
    key = (t.run.model, t.run.id)
    if key not in _ALTI:
        while len(_ALTI) >= _ALTI_KEEP:
            _ALTI.pop(next(iter(_ALTI)))
        _ALTI[key] = alti_matrices(t.comp)[1]
    return _ALTI[key]


def contributions(t: TourRun, step: int) -> tuple[np.ndarray, float]:
    """ALTI+ at output ``step``: each source unit's share (words or tokens), and the output prefix's share."""
    r = alti_rows(t)
    S = len(t.tr.src_tokens)
    spans = t.src_axis()[1]
    row = r[step]
    return np.array([row[s].sum() for s in spans]), float(row[S:].sum())


def stop_moved(t: TourRun, choice: str | None = None) -> Stop:
    """What moved the output; with ``choice`` a source unit's index, the shares redrawn on the run decoded with
    that unit hidden from the cross-attention (at the same step, or its last where that run is shorter)."""
    step = decoding_step(t)
    keys, _ = t.src_axis()
    shares, prefix = contributions(t, step)
    ok = [j for j, k in enumerate(keys) if k not in SPECIAL] or list(range(len(keys)))
    j = max(ok, key=lambda x: shares[x])
    token = t.tr.output_tokens[step]
    s = [say("moved_mix", token=token, step=step),
         say("moved_alti", source=float(shares.sum()), prefix=prefix),
         say("moved_top", unit="word" if t.by_word else "token", key=keys[j], share=float(shares[j]))]
    trial = Trial("Try it", (("as it is", "as-is"), (say("moved_hide", key=keys[j]), str(j))))
    facts = [Fact("source_share", float(shares.sum())), Fact("prefix_share", prefix),
             Fact("top_share", float(shares[j]))]
    hidden = _hidden(t, choice)
    if hidden is None:
        fig = vt.contribution_bars([*keys, say("moved_prefix")], [*map(float, shares), prefix], j,
                                   title=say("moved_title", token=token.strip(), step=step))
    else:
        h, other = hidden, _ablated(t, hidden)
        at = min(step, len(other.tr.output_tokens) - 1)
        got, rest = contributions(other, at)
        said = other.tr.output_tokens[at]
        s.append(say("moved_hidden", key=keys[h], said=said, at=at, share=float(got[h])))
        fig = vt.contribution_bars([*keys, say("moved_prefix")], [*map(float, got), rest], h,
                                   title=say("moved_title_hidden", token=said.strip(), at=at, key=keys[h].strip()))
        facts.append(Fact("hidden_share", float(got[h])))
    return Stop(8, TITLES[8], s, Selection(step=step, section="computation", subview="attribution", units=t.units),
                trial, fig, facts)


def _hidden(t: TourRun, choice) -> int | None:
    """The source unit a pick hides (None: "as it is", or no such unit)."""
    return int(choice) if str(choice).isdigit() and int(choice) < len(t.src_axis()[0]) else None


def _ablated(t: TourRun, j: int) -> TourRun:
    """The run's sentence decoded with source unit ``j`` hidden from the cross-attention, as a run to read."""
    tr = calls.gpu_translate(t.reg_key, t.run.model, t.tr.src_text, t.opts(),
                             Interventions(ablate_src_tokens=frozenset(t.src_axis()[1][j])))
    return TourRun(Run.of(t.lm, t.run.model, tr, inputs=t.run.inputs), t.lm, t.units, t.reg_key)


def tried_moved(t: TourRun, choice: str) -> str:
    j = _hidden(t, choice)
    if j is None:
        return ""
    return _changed(say("moved_hidden_what", key=t.src_axis()[0][j]), t.tr, _ablated(t, j).tr)


# --------------------------------------------------------------------------- stop 10: how it learned

LEARN = 9  # the stop's index
FINAL = "final"  # the trial's value for the default model, the checkpoint (the others are frame indices)
DEFAULT_LABEL = "the default model"


def _frames(t: TourRun):
    """(registry, the run's model's training frames): frames None where none ship (or no registry is known)."""
    reg = calls.REGISTRIES.get(t.reg_key)
    return reg, learn.frame_set(reg, t.run.model) if reg is not None else None


def _frame_choices(fs: learn.FrameSet, default: bool) -> tuple[tuple[str, str], ...]:
    named = tuple((f"after {s:,} updates" + (" (the random start)" if s == 0 else ""), str(k))
                  for k, s in enumerate(fs.steps))
    return named + (((DEFAULT_LABEL, FINAL),) if default else ())


def stop_learn(t: TourRun, choice: str | None = None) -> Stop:
    """What the frames are (and, where run.json says so, that they come from another run than the default
    model), the error falling over them, and the sentence as the picked frame and the default model write it."""
    reg, fs = _frames(t)
    focus = Selection(section="learn", units=t.units)
    if fs is None:
        return _no_frames(t, reg, focus)
    own = fs.index_of(t.run.model)             # None: the run is the default model
    has_default = fs.pair in reg.names
    trial = Trial("Pick a snapshot", _frame_choices(fs, has_default), FINAL if own is None else str(own))
    picked = choice if choice in [v for _, v in trial.choices] else trial.default
    k = None if picked == FINAL else int(picked)
    key = fs.pair if k is None else fs.key_at(k)
    said = (f"The default model translates your sentence as “{_quote(_frame_text(t, key), 120)}”" if k is None else
            f"After {fs.steps[k]:,} updates the {'retrained ' if fs.run else ''}model translates your sentence as "
            f"“{_quote(_frame_text(t, key), 120)}”")
    if k is not None and has_default:  # the default's own sentence beside the frame's
        said += f"; the default model writes “{_quote(_frame_text(t, fs.pair), 120)}”"
    whose = (learn.account(fs).removesuffix(".") + "; the line shows its" if fs.run else
             f"{len(fs.steps)} snapshots of its training were saved on the way, and the line shows its")
    s = ["A model does not come knowing how to translate: it begins as random numbers and learns from example "
         f"translations, nudged a little after each small batch of them, {fs.updates_total:,} times in all.",
         f"{whose} error on the training sentences falling from {fs.train_loss[0]:.2f} at the start to "
         f"{fs.train_loss[-1]:.2f} after {fs.steps[-1]:,} updates (lower is better).",
         said + ("" if said[-2:-1] in tuple(".!?…") else "."),
         "Pick another snapshot below, or leave the tour to open Watch it learn, whose slider makes any snapshot "
         "the model behind every view."]
    lines = [Curve("error on the training sentences", fs.train_loss)]
    if fs.val_loss != fs.train_loss:
        lines.append(Curve("error on sentences it never trained on", fs.val_loss))
    fig = curves_figure(fs.steps, lines, None if k is None else fs.steps[k], "How wrong the model was as it learned",
                        height=320, y_title="error (lower is better)")
    facts = [Fact("frames", len(fs.steps)), Fact("first_loss", fs.train_loss[0]),
             Fact("last_loss", fs.train_loss[-1])] + ([Fact("picked_step", fs.steps[k])] if k is not None else [])
    return Stop(9, TITLES[9], s, focus, trial, fig, facts, model=None if key == t.run.model else key)


def _quote(text: str, n: int) -> str:
    return md_escape(clip(text, n))


def _frame_text(t: TourRun, key: str) -> str:
    """The sentence as model ``key`` (the run's own model, another frame, or the default one) translates it."""
    return t.tr.text if key == t.run.model else calls.gpu_translate(t.reg_key, key, t.tr.src_text, t.opts()).text


def _no_frames(t: TourRun, reg, focus: Selection) -> Stop:
    """The stop where no training frames ship with the run's model: said plainly, and where another ships them."""
    infos = set(reg.names) if reg is not None else set()
    others = sorted({k.rpartition("@")[0] for k in infos if learn.step_of(k) is not None} & infos)
    where = (f"The {direction_label(others[0], reg)} model ships them: pick it in Direction and come back to "
             "this stop." if others else "None of the models on this server ship them.")
    s = ["A model learns by training: it begins as random numbers and is nudged, one small batch of example "
         "translations at a time, until its translations come out right.",
         "No snapshots of this model's training ship with it, so this stop cannot show it learning.", where]
    return Stop(9, TITLES[9], s, focus, Trial("Pick a snapshot", (("the default model (no snapshots ship)", FINAL),)),
                message_figure("No training snapshots ship with this model."), [Fact("frames", 0)])


# --------------------------------------------------------------------------- stop 11

def stop_whole(t: TourRun, choice: str | None = None) -> Stop:
    tr, cfg = t.tr, t.lm.model.cfg
    probs = [s.prob for s in tr.steps]
    hi, lo = int(np.argmax(probs)), int(np.argmin(probs))
    s = [say("whole_run", src=clip(tr.src_text, 120), text=clip(tr.text, 120), n_src=len(tr.src_tokens),
             enc_layers=cfg.n_encoder_layers, n=len(tr.steps), last=len(tr.steps) - 1,
             dec_layers=cfg.n_decoder_layers, heads=cfg.n_heads),
         say("whole_sure", hi=hi, hi_token=tr.steps[hi].token, hi_p=probs[hi], lo=lo, lo_token=tr.steps[lo].token,
             lo_p=probs[lo])]
    facts = [Fact("max_prob", probs[hi]), Fact("min_prob", probs[lo])]
    j = read_index(choice, lo, len(probs))
    if choice not in (None, ""):
        s.append(say("whole_step", j=j, token=tr.steps[j].token, p=probs[j]))
        facts.append(Fact("step_prob", probs[j]))
    s.append(say("whole_leave"))
    steps = tuple((f"step {k}: {x.token}", str(k)) for k, x in enumerate(tr.steps))
    # a picked step: the heads' rows decoded up to it, as the first screen shows them while generating (none
    # picked: every row, so the list names the last step)
    figure = views.watch_heads(t.run, j + 1 if choice not in (None, "") else None, units=t.units)
    return Stop(10, TITLES[10], s, Selection(step=j, section="translate", units=t.units),
                Trial("Look at one step", steps, str(j) if choice not in (None, "") else str(len(probs) - 1)), figure,
                facts)


STOPS = (stop_tokens, stop_positions, stop_one_head, stop_many_heads, stop_masks, stop_residual, stop_cross,
         stop_step, stop_moved, stop_learn, stop_whole)
TRIED = {1: tried_positions, 4: tried_masks, 7: tried_step, 8: tried_moved}


def stop(t: TourRun, index: int, choice: str | None = None) -> Stop:
    """Stop ``index`` (clamped to 0..N_STOPS-1) of the tour on ``t``'s run; ``choice``: the trial's pick (a
    token, a layer, a head, a step, a mask switched off), which the stop's text and figure are drawn for."""
    index = max(0, min(int(index), N_STOPS - 1))
    s = STOPS[index](t, choice)
    if choice in [v for _, v in s.trial.choices]:  # the list shows the pick the stop is drawn for
        s = replace(s, trial=replace(s.trial, value=choice))
    return replace(s, sentences=s.sentences[:4])


def tried(t: TourRun, index: int, choice: str) -> str:
    """What changed when the trial's ``choice`` was tried, and only that (the redrawn stop says the rest):
    a new run for the stops that change the model; for a pick, what is shown instead of what."""
    index = max(0, min(int(index), N_STOPS - 1))
    if index in TRIED:
        return TRIED[index](t, choice)
    default = stop(t, index)
    labels = {v: label for label, v in default.trial.choices}
    if choice in (None, "", default.trial.default) or choice not in labels:
        return ""
    if index == LEARN:
        return _tried_frame(t, default, labels, choice)
    return say("tried_pick", now=labels[choice], was=labels[default.trial.default])


def _tried_frame(t: TourRun, default: Stop, labels: dict, choice: str) -> str:
    """The picked snapshot's translation beside the one the stop opened on."""
    _, fs = _frames(t)
    key = lambda v: fs.pair if v == FINAL else fs.key_at(int(v))  # noqa: E731
    quote = lambda v: _quote(_frame_text(t, key(v)), 100)  # noqa: E731
    before = quote(default.trial.default)
    return (f"**What changed:** {md_escape(labels[choice])}, the model writes “{quote(choice)}” where "
            f"{md_escape(labels[default.trial.default])} wrote “{before}”" + ("" if before[-1:] in ".!?…" else "."))
