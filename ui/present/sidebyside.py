"""Two models side by side as Analysis › Two models shows them: whether a second model may stand beside the
current run's (the same source language), both translations row by row, both per-head grids under the one
selection (each model's own layer and head counts), and each model's AER per head where the sentence has a
gold alignment for its direction. No gradio."""
from __future__ import annotations

from dataclasses import dataclass, field

from model.families import catalog

from . import views
from .learn import step_of
from . import LANG_NAMES, md_escape
from .payload import EVERYDAY
from ..state import ModelShape, Run, RunInputs, Selection, link_url


@dataclass(frozen=True)
class SecondModel:
    """The second model shown beside a run (what a link and an export record): its name, and for the export
    its translation and its trust signals as the API gives them (None: not computed)."""
    run_id: str
    name: str
    translation: str = ""
    trust: dict | None = field(default=None, compare=False, hash=False)


def language(code: str) -> str:
    """A language code's language, whichever spelling a family uses (de, deu, deu_Latn -> German)."""
    code = str(code)
    return LANG_NAMES.get(code) or LANG_NAMES.get(code.split("_")[0]) or code


def _pair_for(info, src: str, tgt: str) -> str | None:
    """A many-to-many model's pair reading ``src``: into ``tgt`` where it knows it, else its first other
    language; None where it cannot read ``src``."""
    code = next((c for c in info.languages if language(c) == language(src)), None)
    if code is None:
        return None
    into = next((c for c in info.languages if language(c) == language(tgt) and c != code), None)
    into = into or next((c for c in info.languages if c != code), None)
    return catalog.pair_name(info.key, code, into) if into else None


def candidates(reg, run: Run | None) -> list[tuple[str, str]]:
    """(label, key) of every model that can stand beside ``run`` (see :func:`readers`)."""
    return [] if run is None else readers(reg, run.tr.src_lang, run.tr.tgt_lang, run.model)


def readers(reg, src: str, tgt: str, own: str | None = None) -> list[tuple[str, str]]:
    """(label, key) of every model reading language ``src``: each offered model that does (the training
    snapshots of a direction among them), and each many-to-many model that knows it, under a pair from it
    (into ``tgt`` where it can); ``own`` left out."""
    out = []
    for name, info in catalog.infos(reg).items():
        if info.many_to_many and not info.base:
            key = _pair_for(info, src, tgt)
            langs = catalog.split_pair(key)[1:] if key else ()
        else:
            key = name if language(info.src_lang) == language(src) else None
            langs = (info.src_lang, info.tgt_lang)
        if key is None or key == own:
            continue
        step = step_of(key)
        what = f"snapshot after {step:,} updates" if step is not None else " → ".join(map(language, langs))
        out.append((f"{key} ({what})", key))
    return out


HERE = Selection(section="analysis", subview="sidebyside")


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _own_models(reg) -> dict:
    """The offered models that translate one direction of their own (no snapshot, no many-to-many pair)."""
    return {k: i for k, i in catalog.infos(reg).items()
            if step_of(k) is None and not i.many_to_many and not i.base}


def elsewhere(reg, run: Run) -> list[tuple[str, str]]:
    """(sentence, relative link) for each direction where two models can stand side by side, for a run whose
    source language no other model reads: the reverse direction (on this run's own translation) and each
    direction with training snapshots (on an everyday sentence of its language)."""
    out = []
    for key, info in _own_models(reg).items():
        if key == run.model or not readers(reg, info.src_lang, info.tgt_lang, key):
            continue
        snapshots = sum(1 for _, k in readers(reg, info.src_lang, info.tgt_lang, key) if step_of(k) is not None)
        reverse = language(info.src_lang) == language(run.tr.tgt_lang) and \
            language(info.tgt_lang) == language(run.tr.src_lang)
        if reverse and run.tr.text.strip():
            text, why = run.tr.text, f"the reverse direction, on this run's {language(info.src_lang)} translation"
        elif snapshots and EVERYDAY.get(info.src_lang):
            text, why = EVERYDAY[info.src_lang][0], f"beside its own {_plural(snapshots, 'training snapshot')}"
        else:
            continue
        label = f"{language(info.src_lang)} → {language(info.tgt_lang)} ({key})"
        out.append((f"[{md_escape(label)}]({link_url('', RunInputs(model=key, text=text), HERE)}): {why}", key))
    return out


def offer_markdown(reg, run: Run) -> str:
    """Before a second model is picked: which models here read this run's source language, or, where none
    does, that in words and the directions where two models can be compared instead."""
    src = language(run.tr.src_lang)
    found = candidates(reg, run)
    if found:
        snapshots = sum(1 for _, k in found if step_of(k) is not None)
        among = f" ({_plural(snapshots, 'training snapshot')} of this run's model among them)" if snapshots else ""
        return (f"{_plural(len(found), 'other model')} on this server {'reads' if len(found) == 1 else 'read'} "
                f"{src}{among}. Pick one as the second model to translate the same sentence.")
    said = (f"No other model on this server reads {src}, so no second model can translate this sentence. "
            "A second model must read the same language as the run.")
    other = elsewhere(reg, run)
    if not other:
        return said
    return said + " Two models can be compared here in:\n\n" + "\n".join(f"- {line}" for line, _ in other)


def refusal(reg, run: Run | None, second: str | None) -> str | None:
    """Why ``second`` cannot stand beside ``run`` (a whole sentence for the user), or None when it can."""
    if run is None:
        return "Translate a sentence first."
    if not second:
        return ("Pick a second model to translate the same sentence." if candidates(reg, run) else
                f"No other model on this server reads {language(run.tr.src_lang)}.")
    catalog.offer_pair(reg, second)  # a many-to-many model's pair is offered when first named
    info = catalog.infos(reg).get(second)
    if info is None:
        return f"This server offers no model named {second}."
    src = run.tr.src_lang  # the language the run read (a many-to-many model's pair says it too)
    if language(info.src_lang) != language(src):
        return (f"{second} reads {language(info.src_lang)}, but this run's sentence is in {language(src)}. "
                "Pick a model that reads the same language.")
    return None


def shape_of(reg, name: str) -> ModelShape:
    cfg = catalog.infos(reg)[name].cfg
    return ModelShape(cfg.n_encoder_layers, cfg.n_decoder_layers, cfg.encoder_heads, cfg.decoder_heads)


def _shape_text(s: ModelShape) -> str:
    """'2 + 2 × 4' (encoder + decoder layers × heads), or '3 × 2 + 1 × 8' where the sides' heads differ."""
    dec = s.n_heads if s.n_decoder_heads is None else s.n_decoder_heads
    if dec == s.n_heads:
        return f"{s.n_encoder_layers} + {s.n_decoder_layers} × {s.n_heads}"
    return f"{s.n_encoder_layers} × {s.n_heads} + {s.n_decoder_layers} × {dec}"


def _mean_p(run: Run) -> str:
    steps = run.tr.steps
    return f"{sum(s.prob for s in steps) / len(steps):.2f}" if steps else "–"


def markdown(reg, first: Run, second: Run) -> str:
    """Both runs row by row: model, direction, shape, translation, mean token probability."""
    a, b = shape_of(reg, first.model), shape_of(reg, second.model)
    rows = [("model", first.model, second.model),
            ("direction", f"{first.tr.src_lang} → {first.tr.tgt_lang}",
             f"{second.tr.src_lang} → {second.tr.tgt_lang}"),
            ("layers (enc + dec) × heads", _shape_text(a), _shape_text(b)),
            ("translation", first.tr.text, second.tr.text),
            ("output tokens", str(len(first.tr.output_ids)), str(len(second.tr.output_ids))),
            ("mean token probability", _mean_p(first), _mean_p(second))]
    lines = ["| | this run | second model |", "|---|---|---|"]
    lines += [f"| {k} | {md_escape(x)} | {md_escape(y)} |" for k, x, y in rows]
    return "\n".join(lines)


def grid_figure(reg, run: Run, sel: Selection, lm, which: str):
    """``run``'s per-head grid for the selection's kind, the layer and head fitted to its model."""
    fitted = sel.fit(shape_of(reg, run.model))
    fig = views.attention_figure(run, fitted.head_ref, "grid", sel.units, lm, sel.scale)
    title = fig.layout.title.text or ""
    fig.update_layout(title_text=f"{which}: {run.model} · {title}" if title else f"{which}: {run.model}")
    return fig


__all__ = ["SecondModel", "candidates", "readers", "offer_markdown", "elsewhere", "language", "refusal", "shape_of",
           "markdown", "grid_figure"]
