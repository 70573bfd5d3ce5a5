"""The "what if" state a link and an export carry beyond the run and the selection: the clean/corrupted
bench shown in Analysis → Two sentences, the output token and foil of Computation → Attribution, the
second model of Analysis → Two models, and the encoder layer Computation → DecoderLens shows.
Which of them a link names follows the screen; a link that names them re-runs the bench and the
attribution on load, and says what it could not use."""
from __future__ import annotations

from dataclasses import asdict

from model.engine.names import HeadRef

from .decoderlens import LensShown
from . import md_escape
from ..state import (ModelShape, PatchLink, Run, Selection, WhatIf, link_url, read_index,
                    whatif_from_query)


def bench_link(text_a, text_b, site, scan, ref: HeadRef, part, point, positions, step, foil, ablation,
               output="") -> PatchLink:
    """The bench's controls (in the section's order) as the link keeps them; ``ref``: the selection's head."""
    return PatchLink(str(text_a or ""), str(text_b or ""), site=site or "z", kind=ref.kind,
                     part=part or "decoder", point=point or "post", layer=ref.layer,
                     head=ref.head, positions=str(positions or "").strip(), scan=scan or "none",
                     step=read_index(step),
                     output=str(output or "").strip(), foil=str(foil or "").strip(), ablation=ablation or "patch")


def _attribution_shown(run: Run | None, held):
    """The attribution on screen for this run (``held``: the section's HeldAttribution), or None."""
    if run is None or getattr(held, "run_id", None) != run.id:
        return None
    return held.attr


def _second_shown(run: Run | None, second) -> str | None:
    """The second model shown beside this run (``second``: Two models' SecondModel), or None."""
    return second.name if run is not None and getattr(second, "run_id", None) == run.id else None


def _lens_shown(run: Run | None, lens) -> int | None:
    """The encoder layer DecoderLens shows for this run (``lens``: its LensShown), or None."""
    return lens.layer if run is not None and isinstance(lens, LensShown) and lens.run_id == run.id else None


def on_screen(sel: Selection, run: Run | None, bench: PatchLink | None, held, second=None, lens=None,
              corpus: str | None = None) -> WhatIf:
    """What the link to this screen adds: the bench where Two sentences shows, the attribution's
    output token and foil where Attribution shows, the second model where Two models shows, the encoder
    layer where DecoderLens shows; and the corpus folder open in Analysis › Corpus wherever the screen is
    (a head opened from it leads to other sections, and the link comes back to the corpus)."""
    where = (sel.section, sel.subview)
    patch = bench if where == ("analysis", "pair") else None
    other = _second_shown(run, second) if where == ("analysis", "sidebyside") else None
    layer = _lens_shown(run, lens) if where == ("computation", "decoderlens") else None
    c = _attribution_shown(run, held) if where == ("computation", "attribution") else None
    corpus = corpus or None
    if c is None:
        return WhatIf(patch=patch, second=other, lens_layer=layer, corpus=corpus)
    return WhatIf(patch=patch, attr_pos=c.attribution.position, foil=None if c.foil is None else c.foil.asked,
                  second=other, lens_layer=layer, corpus=corpus)


def export_settings(run: Run, bench: PatchLink | None, held, second=None) -> dict:
    """What an export adds: the bench last run (its controls and model), the attribution with its foil, and
    the second model shown beside the run (its name, translation and trust signals)."""
    out = {}
    if _second_shown(run, second):
        out["second_model"] = second.name
        out["second_model_output"] = {"translation": second.translation, "trust": second.trust}
    if bench is not None:
        out["patch_bench"] = asdict(bench) | {"model": run.model}
    c = _attribution_shown(run, held)
    if c is not None:
        a = c.attribution
        out["attribution"] = {"position": a.position, "token": a.token, "target": c.target,
                              "foil": None if c.foil is None else c.foil.asked,
                              "foil_token": None if c.foil is None else c.foil.piece,
                              "p_token": c.p_token, "p_foil": c.p_foil}
    return out


def load_outputs(shell) -> list:
    """The components a link's bench, foil, second model and DecoderLens layer set on load."""
    a, b, c = shell.analysis, shell.analysis.bench, shell.computation
    return [a.pair_a, a.pair_b, b.patch_site, b.patch_scan, b.patch_part, b.patch_point, b.patch_sel, b.patch_pos,
            b.patch_step, b.patch_foil, b.patch_ablation, b.patch_output, b.patch_md, b.patch_plot, b.patch_state,
            b.patch_model, c.attr.pos, c.attr.foil, c.attr.foil_text, c.attr.md, c.attr.plot, c.attr.table,
            c.attr.state, *(x for name in ("sidebyside", "decoderlens", "corpus")
                            for x in getattr(shell.restorers.get(name), "outputs", []))]


def restore(shell, run: Run, params: dict, sel: Selection) -> tuple[dict, list[str]]:
    """(values, problems) for the bench and the foil a link names, computed for ``run``."""
    w, problems = whatif_from_query(params, ModelShape.of(shell.lm(run)))
    values, restore_bench, restore_attribution = {}, shell.restorers.get("bench"), shell.restorers.get("attribution")
    if w.patch is not None and restore_bench is not None:
        values |= restore_bench(shell, run, w.patch)
    if (w.attr_pos is not None or w.foil) and restore_attribution is not None:
        values |= restore_attribution(shell, run, w, sel, problems)
    restore_second = shell.restorers.get("sidebyside")
    if w.second and restore_second is not None:
        values |= restore_second(shell, run, sel, w.second)
    restore_lens = shell.restorers.get("decoderlens")
    shows_lens = (sel.section, sel.subview) == ("computation", "decoderlens")  # elsewhere the layer is not drawn
    if w.lens_layer is not None and shows_lens and restore_lens is not None:
        values |= restore_lens(shell, run, sel, w.lens_layer)
    restore_corpus = shell.restorers.get("corpus")
    if w.corpus and restore_corpus is not None:
        values |= restore_corpus(shell, run, sel, w.corpus)
    return values, problems


def link_after_load(shell, run: Run, sel: Selection, base_url: str, values: dict) -> str | None:
    """The link box after a link restored a bench or a foil: it names them too (None: nothing restored)."""
    bench = values.get(shell.analysis.bench.patch_state)
    held = values.get(shell.computation.attr.state)
    held = held if getattr(held, "run_id", None) == run.id else None
    second = next((v for v in values.values() if hasattr(v, "run_id") and hasattr(v, "name")), None)
    second = second if _second_shown(run, second) else None
    lens = next((v for v in values.values() if isinstance(v, LensShown)), None)
    lens = lens if _lens_shown(run, lens) is not None else None
    parts = getattr(shell, "corpus", None)
    corpus = values.get(parts.held) if parts is not None else None
    if run.inputs is None or (bench is None and held is None and second is None and lens is None and not corpus):
        return None
    return link_url(base_url, run.inputs, sel.fit(ModelShape.of(shell.lm(run))),
                    on_screen(sel, run, bench, held, second, lens, corpus))


def notice(problems: list[str]) -> str:
    return "\n\n".join(f"⚠️ {md_escape(x)}" for x in problems)
