"""Issue 5's views: added server time per view and its figure payload, in-process (shipped model).

Each view is built the way its tab's handler builds it, after a greedy translate (the beam tree
after a beam-4 decode, as the tab does); payload = the figure's JSON, as Gradio sends it.
"""
from __future__ import annotations

import sys
import time

from .appbench import load_app, standalone, unavailable
from .common import BenchConfig, entry, figure, read_lines, stats
from ui import present
from model import analysis
from ui import calls
from ui import state
from ui import views
from ui.sections import translate as translate_section
from ui.sections import analysis as analysis_section

N_SENTENCES = 20


def available(cfg: BenchConfig) -> str | None:
    return unavailable(cfg, need_server=False)


def run(cfg: BenchConfig) -> dict:
    app, reg_key, reg, name, root, how = load_app(cfg)
    
    lm = reg.models[name]
    sentences, _ = read_lines(cfg, "test_2016_flickr", lm.src_lang, 5 if cfg.quick else N_SENTENCES)
    opts = translate_section.opts_from("greedy", 4, 100)
    views.warm_up(reg_key)

    def timed(fn):
        t0 = time.perf_counter()
        value = fn()
        return (time.perf_counter() - t0) * 1e3, value

    fns = {
        "rollout": lambda r: views.rollout_view_figure(r, "all"),
        "alignment": lambda r: views.alignment_view_figure(r, "layer", 3, 0),
        "alignment_rollout": lambda r: views.alignment_view_figure(r, "rollout", 0, 0),
        "head_map": lambda r: views.head_map_figure(r, present.head_choices(lm)[0]),
        "beam_tree": lambda r: views.beam_view_figure(state.BeamView(
            r.model, (tb := calls.gpu_beam(reg_key, name, r.tr.src_text, 4)), analysis.beam_tree_data(lm, tb))),
        "pair": lambda r: views.pair_view_figure(state.PairRun(name, *calls.gpu_pair(reg_key, name, r.tr.src_text,
                                                                                   r.tr.src_text)), "decoder.cross_attn", 0, 0),
    }
    ms = {k: [] for k in fns}
    kb = {k: [] for k in fns}
    for s in sentences:
        tr = calls.gpu_translate(reg_key, name, s, opts)
        r = state.Run(name, tr)
        for k, fn in fns.items():
            t, fig = timed(lambda: fn(r))
            t2, js = timed(fig.to_json)
            ms[k].append(t + t2)
            kb[k].append(len(js) / 1000)
    figures = []
    for k in fns:
        st, sb = stats(ms[k]), stats(kb[k])
        print(f"  {k:<18} p50 {st['p50']:7.1f} ms  p95 {st['p95']:7.1f} ms  payload p50 {sb['p50']:6.1f} kB", flush=True)
        figures.append(figure(f"views.{k}.p50_ms", f"{k}: server time (build + JSON): p50", st["p50"], "ms"))
        figures.append(figure(f"views.{k}.p50_kb", f"{k}: figure payload: p50", sb["p50"], "kB"))
    t0 = time.perf_counter()
    analysis_section.cached_profiles(reg_key, name, 16)
    figures.append(figure("views.profiles16.s", "head profiles averaged over 16 val sentences: first (uncached) "
                          "computation", time.perf_counter() - t0, "s"))
    figures += png_export(app, r)
    return entry("views", cfg, figures, {
        "method": "in-process, greedy translate then each view as its tab builds it (beam tree includes its "
                  "beam-4 decode, pair its two decodes); payload = the figure's JSON",
        "models": f"{name} from {root} ({how})"})


def png_export(app, r) -> list[dict]:
    """PNG download of the alignment figure: each render starts a headless Chromium through Kaleido."""
    import tempfile
    from pathlib import Path

    from viz import export
    fig = views.alignment_view_figure(r, "layer", 3, 0)
    folder = Path(tempfile.mkdtemp(prefix="bench-png-"))
    times, sizes = [], []
    for i in range(3):
        t0 = time.perf_counter()
        try:
            path = export.figure_png(fig, folder / f"{i}.png")
        except export.ImageExportUnavailable as e:
            print(f"  png export unavailable: {str(e)[:120]}", flush=True)
            return []
        times.append((time.perf_counter() - t0) * 1e3)
        sizes.append(path.stat().st_size / 1000)
    st = stats(times)
    print(f"  png_export         p50 {st['p50']:7.1f} ms  file {sizes[0]:6.1f} kB", flush=True)
    return [figure("views.png_export.p50_ms", "figure download as PNG (Kaleido + Chromium, 3 renders): p50",
                   st["p50"], "ms"),
            figure("views.png_export.kb", "figure download as PNG: file size", sizes[0], "kB")]


if __name__ == "__main__":
    raise SystemExit(standalone("views", sys.modules[__name__]))
