"""Server time per event, in process: the app's own handlers through Gradio's own processing.

The app is built as ``python app.py`` builds it (``app.build_app`` on the checkpoints folder, then its
warm-up) and each event runs the way the server runs it: ``Blocks.process_api`` once per frame
(preprocess, the handler, postprocess, the streaming diff), then the frame's JSON. Not included: HTTP,
the queue and the browser (``bench.payload`` counts what they carry).

First screen: ``translate_stream`` with the UI's defaults (greedy, at most 100 tokens, cross-attention
grid) on the first 20 Multi30k test sentences: the decode and every figure. Split: the decode alone,
the app's handler alone, and Gradio's processing (the rest). Then, once per sentence in the same
session, every other view: the replay the front end chains after a translate (its sleeps of
``WATCH_PACE`` between frames set to 0, their total reported apart), the sections drawn when opened,
another attention kind, the analysis views, the beam tree, Compare (positional encoding off), two
sentences side by side, and the Computation views (forced decoding last: it becomes the current run).
Medians of the repetitions per sentence; p50 / p95 over the sentences.
"""
from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

from .common import InProcessApp, entry, figure, ms, sentences, standalone, stats

N, N_QUICK = 20, 5
TARGET_MS = 150.0
VIEWS = {  # event -> the inputs it changes from the page's defaults, by elem_id (in this order, one session)
    "on_replay": {},  # chained after translate_stream: the decode replayed (pacing set to 0)
    "open_generation": {}, "open_interventions": {},
    "attention_view": {"attn-kind": "encoder.self_attn"}, "rollout_view": {}, "alignment_view": {},
    "beam_tree": {}, "compare_ui": {"tog-positional": False}, "pair_view": {},
    "open_computation": {}, "head_computation": {"attn-kind": "decoder.cross_attn", "head-query": 1},
    "residual_view": {"resid-part": "encoder"}, "embedding_steps": {"emb-part": "decoder", "emb-pos": 1},
    "attribution_view": {"attr-pos": 1, "attr-steps": 64}, "forced_view": {},  # forced last: it becomes the run
}


def screen_figures(st: dict, per_view: dict, pace: float) -> list[dict]:
    """The first screen's figures and each view's server time and JSON size."""
    p50 = {k: s["p50"] for k, s in st.items()}
    figures = [
        figure("server.screen.p50_ms", "first screen: translate, stream, every figure (pacing excluded): p50",
               p50["screen"], "ms", "<=", TARGET_MS),
        figure("server.screen.p95_ms", "first screen: p95", st["screen"]["p95"], "ms"),
        figure("server.screen_cpu.p50_ms", "first screen in CPU time of the process (others' load aside): p50",
               p50["screen_cpu"], "ms"),
        figure("server.handler.p50_ms", "of which the app's handler (decode and every figure): p50",
               p50["handler"], "ms"),
        figure("server.decode.p50_ms", "of which the decode (greedy, with the full trace): p50", p50["decode"], "ms"),
        figure("server.gradio.p50_ms", "of which Gradio's processing of the frames: p50", p50["gradio"], "ms"),
        figure("server.pacing.p50_ms", f"replay pacing, not included ({pace:g} s × replayed frames): p50",
               p50["pacing"], "ms"),
        figure("server.session.p50_ms", "a new session's state, once per visitor (not included): p50",
               p50["session"], "ms"),
    ]
    for a, (t, kb) in per_view.items():
        figures += [figure(f"server.{a}.p50_ms", f"{a}: server time p50", stats(t)["p50"], "ms"),
                    figure(f"server.{a}.p50_kb", f"{a}: JSON sent p50", stats(kb)["p50"], "kB")]
    return figures


def png_figures(cfg, fig) -> list[dict]:
    """A figure downloaded as PNG: p50 time and file size (a note instead where Kaleido cannot run)."""
    from viz import export
    folder = Path(tempfile.mkdtemp())
    try:
        png = [ms(lambda: export.figure_png(fig, folder / "a.png")) for _ in range(3)]
    except export.ImageExportUnavailable as e:
        cfg.notes.append(f"PNG export unavailable: {str(e)[:200]}")
        return []
    return [figure("server.png.p50_ms", "a figure downloaded as PNG (Kaleido + Chromium): p50",
                   statistics.median(png), "ms"),
            figure("server.png.kb", "a figure downloaded as PNG: file size", (folder / "a.png").stat().st_size / 1e3,
                   "kB")]


def run(cfg) -> dict:
    from ui import calls
    from ui.present import views
    from ui.sections import translate

    app = InProcessApp(cfg)
    key, fns, inputs = app.key, app.fns, app.inputs
    pace, translate.WATCH_PACE = translate.WATCH_PACE, 0.0
    name = cfg.direction
    texts = sentences(cfg, name.split("-")[0], N_QUICK if cfg.quick else N)
    refs = sentences(cfg, name.split("-")[1], len(texts))
    reps = cfg.reps or (1 if cfg.quick else 3)

    def event(state, api, values) -> tuple[float, float, int, int]:
        """(ms, process CPU ms, JSON bytes, frames) of one event, every frame through process_api."""
        e = app.event(state, api, values)
        return e.ms, e.cpu_ms, e.bytes, e.frames

    opts = translate.opts_from("greedy", 4, 100)
    per = {k: [] for k in ("screen", "screen_cpu", "handler", "decode", "gradio", "session", "pacing", "frames")}
    per_view = {a: ([], []) for a in VIEWS}
    for i, text in enumerate(texts):
        v = {"input-text": text, "direction": name, "pair-a": text, "pair-b": texts[(i + 1) % len(texts)],
             "ref-text": refs[i]}
        rounds = []
        for _ in range(reps):
            d = ms(lambda: calls.gpu_translate_one(key, name, text, opts))
            h = ms(lambda: [None for _ in fns["translate_stream"].fn(*inputs("translate_stream", v))])
            t0 = time.perf_counter()
            state = app.session()
            s = (time.perf_counter() - t0) * 1e3
            rounds.append((d, h, s, *event(state, "translate_stream", v)))
        run_ = next(state[c._id] for c in fns["translate_stream"].outputs if c.stateful)
        for k, j in (("decode", 0), ("handler", 1), ("session", 2), ("screen", 3), ("screen_cpu", 4), ("frames", 6)):
            per[k].append(statistics.median(r[j] for r in rounds))
        per["gradio"].append(statistics.median(r[3] - r[1] for r in rounds))
        per["pacing"].append(pace * 1e3 * min(translate.REPLAY_FRAMES, max(len(run_.tr.steps) - 1, 0)))
        for a, values in VIEWS.items():
            t, _, size, _ = event(state, a, {**v, **values})
            per_view[a][0].append(t)
            per_view[a][1].append(size / 1e3)
        print(f"  {i + 1:2d}: first screen {per['screen'][-1]:6.1f} ms (handler {per['handler'][-1]:5.1f}, decode "
              f"{per['decode'][-1]:5.1f}); pacing {per['pacing'][-1]:4.0f} ms; "
              + ", ".join(f"{a} {per_view[a][0][-1]:.0f}" for a in VIEWS), flush=True)
    translate.WATCH_PACE = pace
    st = {k: stats(x) for k, x in per.items()}
    figures = screen_figures(st, per_view, pace)
    t = event(state, "head_profiles", {"direction": name})[0]
    figures.append(figure("server.head_profiles.s", "head profiles over 16 validation sentences, first (uncached)",
                          t / 1e3, "s"))
    figures += png_figures(cfg, views.alignment_view_figure(run_, "layer", 3, 0))
    app.close()
    return entry(figures, model=f"{cfg.checkpoint}, in the app with every model of {cfg.app_root.name}/",
                 data=f"first {len(texts)} lines of Multi30k test_2016_flickr.{name.split('-')[0]}",
                 method=f"in process, Blocks.process_api per frame; median of {reps} rep(s) per sentence, p50 "
                        f"over sentences; views once per sentence in the translate's session",
                 summary=f"{statistics.fmean(per['frames']):.1f} frames per translate on average",
                 ms=st, views={a: {"ms": stats(t), "kb": stats(kb)} for a, (t, kb) in per_view.items()})


if __name__ == "__main__":
    raise SystemExit(standalone("server", run))
