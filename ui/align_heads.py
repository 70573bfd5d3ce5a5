"""Head profiles' "Alignment (AER)" ranking and the /alignment_heads endpoint.

The ranking of a model is read from ``checkpoints/alignments/<model>.heads.json`` when that file was
computed from the loaded weights and the shipped reference; otherwise it is computed on the first
request (every validation sentence teacher-forced, a minute or two on a CPU) and kept for the
server's life. Entries are read-only after insertion, so sessions share them safely.
"""
from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

import gradio as gr
import numpy as np

from model.analysis.alignment.heads import HeadRanking, ranking_for
from model.analysis.alignment.reference import reference_path
from model.analysis.alignment.sentence import ValReference, sentence_ranking, val_reference
from model.engine.names import CROSS, HeadRef
from viz.align_rank import aer_grid

from . import calls
from .present import views
from .api import _api_model
from .present import md_escape, no_model_message

TABLE_HEADERS = ["rank", "what", "layer", "head", "AER", "precision", "recall", "F1", "rows read"]
READINGS = {"output": "at the row that predicts the word", "shift": "at the row where the word is the decoder input"}
_RANKINGS: dict[tuple[str, str], HeadRanking] = {}
_LOCK = threading.Lock()
log = logging.getLogger("attention-explorer")


@calls.model_call(duration=300)
def gpu_alignment_ranking(reg_key: str, name: str) -> HeadRanking:
    """The model's ranking: the shipped file when current, else computed (the lock held per batch)."""
    lm = calls.lm_for(reg_key, name)
    return ranking_for(lm, calls.align_dir(reg_key), calls.DATA_DIRS, lock=calls.MODEL_LOCK)


@calls.model_call(duration=60)
def gpu_sentence_ranking(reg_key: str, name: str, index: int) -> tuple[ValReference, HeadRanking]:
    """One validation sentence's ranking (a single teacher-forced run)."""
    lm = calls.lm_for(reg_key, name)
    folder = calls.align_dir(reg_key)
    pair = val_reference(folder, calls.DATA_DIRS, lm.src_lang, lm.tgt_lang, index)
    with calls.MODEL_LOCK:
        return pair, sentence_ranking(lm, pair, reference_path(folder, lm.src_lang, lm.tgt_lang))


def parse_sentence(value) -> int | None:
    """The sentence box: blank or None = the whole set; else a non-negative whole number."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    try:
        f = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"sentence must be a validation index (a whole number), not {value!r}") from None
    if f != int(f) or f < 0:
        raise ValueError(f"sentence must be a validation index (a whole number ≥ 0), not {value!r}")
    return int(f)


def cached_ranking(reg_key: str, name: str) -> HeadRanking:
    key = (reg_key, name)
    with _LOCK:
        hit = _RANKINGS.get(key)
    if hit is not None:
        return hit
    value = gpu_alignment_ranking(reg_key, name)
    with _LOCK:
        return _RANKINGS.setdefault(key, value)


def ranking_rows(r: HeadRanking) -> list[list]:
    return [[n + 1, e.label, "" if e.layer is None else e.layer, "" if e.head is None else e.head,
             round(e.aer, 4), round(e.scores.precision, 4), round(e.scores.recall, 4), round(e.scores.f1, 4),
             e.best] for n, e in enumerate(r.entries)]


def ranking_figure(r: HeadRanking):
    heads, layers = r.of("head"), sorted(r.of("layer"), key=lambda e: e.layer)
    L = max(e.layer for e in heads) + 1
    H = max(e.head for e in heads) + 1
    aer, shifted = np.full((L, H), np.nan), np.zeros((L, H + 1), bool)
    for e in heads:
        aer[e.layer, e.head] = e.aer
        shifted[e.layer, e.head] = e.best == "shift"
    for e in layers:
        shifted[e.layer, H] = e.best == "shift"
    notes = [f"{e.label}: AER {e.aer:.3f}" for e in r.of("all") + r.of("rollout")]
    return aer_grid(aer, [e.aer for e in layers], shifted, kind=CROSS, notes=notes + ["ˢ: the shifted rows align better"],
                    title=f"AER of each cross-attention head against the reference ({r.model}; lower is better); "
                          "click a head to open it")


def ranking_markdown(r: HeadRanking, pair: ValReference | None = None) -> str:
    best = r.of("head")[0]
    what = (f"validation sentence {pair.index} teacher-forced (*{md_escape(pair.source)}* → "
            f"*{md_escape(pair.target)}*)" if pair is not None else
            f"{r.sentences} validation sentences teacher-forced ({r.skipped} skipped)")
    done = "" if pair is not None else f" Computed in {r.seconds:.0f} s, once per model."
    return (f"**{md_escape(r.model)}**: {what}, scored against `{r.reference}`, a statistical reference "
            f"(a word aligner run both ways on Multi30k, grow-diag-final-and), not human gold: the ranking is "
            f"relative to it. Best head: **{md_escape(best.label)}**, AER {best.aer:.3f} (F1 {best.scores.f1:.3f}, "
            f"read {READINGS[best.best]}).{done}")


def ranking_json(r: HeadRanking) -> dict:
    """The API's answer: the ranking best first, each entry with both readings of its rows."""
    d = r.to_json()
    entries = d.pop("entries")
    for n, e in enumerate(entries):
        e["rank"] = n + 1
    return d | {"ranking": entries, "metric": "AER (Och & Ney 2003): sure = both aligner directions agree, "
                                              "possible = grow-diag-final-and; lower is better"}


def sentence_json(pair: ValReference, r: HeadRanking) -> dict:
    """The per-sentence answer: the ranking on that one sentence, with its texts and reference links."""
    ref = sorted(pair.reference.possible)
    return ranking_json(r) | {"sentence": pair.index, "source": pair.source, "target": pair.target,
                              "links": [[i, j, (i, j) in pair.reference.sure] for i, j in ref]}


def show(reg_key: str, reg, run, name, sentence=None) -> tuple:
    """(markdown, figure, table rows) for the run's model (or the chosen direction): over the set, or on
    one validation sentence when ``sentence`` holds its index."""
    name = run.model if run is not None else name
    problem = no_model_message(reg, name)
    if problem:
        return f"⚠️ {problem}", views.message_figure(problem), None
    note = ""
    try:
        index = parse_sentence(sentence)
        if index is not None:
            pair, r = gpu_sentence_ranking(reg_key, name, index)
            return ranking_markdown(r, pair), ranking_figure(r), ranking_rows(r)
    except ValueError as e:
        # a sentence that cannot be scored leaves the whole set's ranking on screen, not an empty one
        note = f"⚠️ {md_escape(str(e))}. The whole set's ranking is shown.\n\n"
    try:
        r = cached_ranking(reg_key, name)
    except ValueError as e:
        return f"{note}⚠️ {md_escape(str(e))}", views.message_figure("No alignment ranking for this model."), None
    return note + ranking_markdown(r), ranking_figure(r), ranking_rows(r)


def make_api(reg_key: str):

    def alignment_heads(direction: str = "", sentence: str = "") -> dict:
        """Cross-attention heads (and layer means, the mean of all layers and the rollout) ranked by their
        alignment error rate (AER) against a statistical reference alignment of Multi30k's validation set,
        with precision, recall, F1, and which reading of the rows scored better ('output': the row predicting
        the word; 'shift': the row where the word is the decoder input). `sentence`: blank for the whole
        set, or a validation index for that one sentence's AER (the answer adds its texts and reference
        links [source word, target word, sure])."""
        name = _api_model(reg_key, direction)
        try:
            index = parse_sentence(sentence)
            if index is not None:
                return sentence_json(*gpu_sentence_ranking(reg_key, name, index))
            return ranking_json(cached_ranking(reg_key, name))
        except ValueError as e:
            raise gr.Error(str(e)[:300]) from None
        except Exception as e:
            log.exception("alignment ranking failed")
            raise gr.Error(f"The alignment ranking failed ({type(e).__name__}).") from None
    return alignment_heads


EXPLAIN = ("How well each cross-attention head's strongest source word matches a reference word alignment of "
           "the validation set (AER: lower is better; F1: higher is better). The reference translation is "
           "teacher-forced; pieces are pooled into words; each target word is linked to the source word it "
           "attends to most. Both readings of the rows are scored: the row that predicts the word, and the "
           "row where it is the decoder input (shifted). **Click a head** in the grid to open it in Attention, "
           "or a table row to see its map here.")


@dataclass(frozen=True)
class AlignParts:
    """The ranking's controls and results, inside the Head profiles tab."""
    sentence: gr.Textbox
    button: gr.Button
    md: gr.Markdown
    heat: gr.Plot
    table: gr.Dataframe


def build() -> AlignParts:
    """The ranking's parts, inside the Head profiles tab."""
    with gr.Accordion("Alignment (AER): which heads align words", open=False, elem_id="align-acc"):
        gr.Markdown(EXPLAIN, elem_classes="explain")
        with gr.Row():
            sentence = gr.Textbox(label="Validation sentence (blank: the whole set)", placeholder="e.g. 7",
                                  max_lines=1, scale=1, elem_id="align-sentence")
            button = gr.Button("Rank the heads by alignment", elem_id="align-btn", scale=1)
        md = gr.Markdown(elem_id="align-md")
        heat = gr.Plot(label="AER per layer × head", elem_id="align-heat", show_label=False)
        table = gr.Dataframe(headers=TABLE_HEADERS, label="Ranked, best first", interactive=False,
                             elem_id="align-table")
    return AlignParts(sentence=sentence, button=button, md=md, heat=heat, table=table)


def wire(shell) -> None:
    p, a = shell.analysis.align, shell.analysis

    def on_rank(run, name, sentence):
        try:
            return show(shell.reg_key, shell.reg, run, name, sentence)
        except Exception as e:
            log.exception("alignment ranking failed")
            return (f"⚠️ The alignment ranking failed ({md_escape(type(e).__name__)}).",
                    views.error_figure("alignment ranking"), None)

    def on_row(run, evt: gr.SelectData):
        """A head's row opens its map of the current run in the head-map panel above."""
        try:
            row = evt.row_value
            if row is None or row[3] in ("", None):
                return gr.skip(), views.message_figure("This row is not a single head: pick a head's row."), \
                    *(gr.skip(),) * 3
            label = str(HeadRef(CROSS, row[2], row[3]))
            return label, views.head_map_figure(run, label, shell.lm(run)), *shell.select_head(run, label)
        except Exception:
            log.exception("alignment row select failed")
            return gr.skip(), views.error_figure("head's map"), *(gr.skip(),) * 3

    p.button.click(on_rank, [shell.run_state, shell.direction, p.sentence], [p.md, p.heat, p.table],
                   api_visibility="private", **shell.model_event())
    p.table.select(on_row, [shell.run_state], [a.prof_pick, a.prof_head_plot, shell.kind, shell.layer, shell.head],
                   api_visibility="private", concurrency_limit=4, show_progress="hidden")
    gr.api(make_api(shell.reg_key), api_name="alignment_heads", **shell.model_event())
