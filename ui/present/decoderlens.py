"""DecoderLens as the Computation sub-view and the benchmark show it: the options a run's lens decodes with,
how far each layer's translation already matches the model's own, the caption, and the two figures (the
tokens per encoder layer; one layer's cross-attention). No gradio."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from model.analysis.decoderlens import DecoderLens, LensLayer
from model.engine.decoding import DecodeOptions
from model.engine.names import CROSS
from model.engine.config import NO_INTERVENTION, Interventions
from viz import attention as va
from viz.decoderlens import lens_figure

from . import decoder_rows, md_escape
from ..settings import DEFAULT_OUTPUT_TOKENS, MAX_BEAM, MAX_OUTPUT_TOKENS
from ..state import Run, read_index


@dataclass(frozen=True)
class LensShown:
    """The encoder layer whose decode's cross-attention DecoderLens shows for a run (what a link records)."""
    run_id: str
    layer: int


@dataclass(frozen=True)
class LensAsk:
    """What a run's DecoderLens decodes: its sentence, its decoding options and its interventions."""
    text: str
    opts: DecodeOptions
    iv: Interventions


def ask_of(run: Run) -> LensAsk:
    """The run's own sentence, beam and length, and its interventions. A forced run (a reference, or a
    branch's prefix) is decoded freely here: each layer writes its own translation."""
    inputs = run.inputs
    if inputs is None:
        return LensAsk(run.tr.src_text, DecodeOptions(max_len=DEFAULT_OUTPUT_TOKENS), run.tr.interventions)
    beam = inputs.beam if inputs.decoding == "beam" else 1
    opts = DecodeOptions(beam=max(1, min(beam, MAX_BEAM)), max_len=max(1, min(inputs.max_len, MAX_OUTPUT_TOKENS)),
                         pad_src_to=inputs.toggles.pad_to)
    iv = inputs.toggles.interventions() if inputs.toggles.changed else NO_INTERVENTION
    return LensAsk(inputs.text, opts, iv)


def overlap(tokens: list[str], final: list[str]) -> float:
    """Unigram F1 of a layer's output pieces against the last layer's (both without their end token):
    1 when the layer already writes the model's translation, word order aside."""
    a, b = Counter(tokens), Counter(final)
    common = sum((a & b).values())
    if not common:
        return 0.0
    precision, recall = common / sum(a.values()), common / sum(b.values())
    return 2 * precision * recall / (precision + recall)


def _body(layer: LensLayer) -> list[str]:
    toks = layer.tokens
    return toks[:-1] if toks and toks[-1] in ("<eos>", "</s>") else toks


def layer_rows(lens: DecoderLens) -> list[tuple[int, str, float, float, int]]:
    """Per encoder layer: (layer, its text, mean probability, overlap with the last layer, output pieces)."""
    final = _body(lens.last)
    return [(l.layer, l.translation.text, float(l.probabilities.mean()) if len(l.probabilities) else 0.0,
             overlap(_body(l), final), len(l.tokens)) for l in lens.layers]


def markdown(lens: DecoderLens) -> str:
    """A table of each layer's translation, its mean token probability and its overlap with the model's own."""
    how = ("through the encoder's final norm" if lens.final_norm else
           "as it is (this model normalises after every sublayer and has no final norm)")
    lines = [f"The decoder cross-attends to encoder layer ℓ's output, {how}, and decodes as the run does. "
             "The last row is the model's own translation. *Overlap*: unigram F1 of the layer's pieces against "
             "the last row's (1 = the same pieces, order aside).", "",
             "| encoder layer | translation | mean p | overlap |", "|---|---|---|---|"]
    for layer, text, p, f1, _ in layer_rows(lens):
        lines.append(f"| {layer} | {md_escape(text) or '∅'} | {p:.2f} | {f1:.2f} |")
    return "\n".join(lines)


def tokens_figure(lens: DecoderLens):
    final = set(_body(lens.last))
    return lens_figure([l.layer for l in lens.layers], [l.tokens for l in lens.layers],
                       [l.probabilities for l in lens.layers], [[t in final for t in l.tokens] for l in lens.layers],
                       title="DecoderLens: what the decoder writes from each encoder layer",
                       notes=["colour: the token's probability when chosen", "bold: also in the last layer's output"])


def attention_figure(lens: DecoderLens, layer: int):
    """The cross-attention (mean over heads, per decoder layer) of the run that read encoder layer ``layer``."""
    run = lens.layers[read_index(layer, 0, len(lens.layers))]
    tr = run.translation
    rows, q_title = decoder_rows(tr.axes(CROSS)[0], tr.output_tokens)
    return va.layer_means(run.cross_attention(), rows, tr.axes(CROSS)[1], query_valid=tr.query_valid(CROSS),
                          query_title=q_title, kind=CROSS,
                          title=f"Cross-attention of the decode that read encoder layer {run.layer} (mean over heads)")


def layer_choices(lens_or_n) -> list[tuple[str, int]]:
    n = lens_or_n if isinstance(lens_or_n, int) else len(lens_or_n.layers)
    return [(f"encoder layer {i}" + (" (the model's own)" if i == n - 1 else ""), i) for i in range(n)]


__all__ = ["LensShown", "LensAsk", "ask_of", "overlap", "layer_rows", "markdown", "tokens_figure", "attention_figure",
           "layer_choices"]
