"""The guided tour's server time and bytes per stop, in process through Gradio's own processing.

The app is built as ``python app.py`` builds it (``bench.common.InProcessApp``). For each of the first
20 Multi30k test sentences (5 with ``--quick``), a session translates it with the UI's defaults (the
first screen: ``translate_stream``, its server time and JSON kept to check the first screen's targets
still hold with the tour's start button on it), then opens the tour (``tour_start``: stop 1) and
presses Next through the other stops (``tour_next``). The first screen is the median of 3 sessions per sentence (``--reps``), as in
``bench.server``. Per stop: the event's server time
(``Blocks.process_api``, the handler and Gradio's processing, no HTTP) and the JSON it sends. p50 and
p95 over the sentences; the first sentence is a warm-up, not counted.
"""
from __future__ import annotations

from .common import InProcessApp, entry, figure, sentences, standalone, stats

N, N_QUICK = 20, 5
SCREEN_MS, SCREEN_KB = 150.0, 300.0


def run(cfg) -> dict:
    from ui.present import tour
    from ui.sections import translate

    app = InProcessApp(cfg)
    pace, translate.WATCH_PACE = translate.WATCH_PACE, 0.0
    name = cfg.direction
    texts = sentences(cfg, name.split("-")[0], (N_QUICK if cfg.quick else N) + 1)
    screen_ms, screen_kb = [], []
    stop_ms, stop_kb = [[] for _ in range(tour.N_STOPS)], [[] for _ in range(tour.N_STOPS)]
    reps = cfg.reps or (1 if cfg.quick else 3)
    for i, text in enumerate(texts):
        values = {"input-text": text, "direction": name}
        # the first screen as bench.server times it: the median of ``reps`` sessions (the decode cached after
        # the first, as a shared link's visitors find it); the tour in the last of them
        rounds = []
        for _ in range(reps):
            state = app.session()
            rounds.append(app.event(state, "translate_stream", values))
        first = sorted(rounds, key=lambda e: e.ms)[len(rounds) // 2]
        events = [app.event(state, "tour_start" if k == 0 else "tour_next", values) for k in range(tour.N_STOPS)]
        if i == 0:
            continue  # warm-up: the first figures of each kind build plotly's templates
        screen_ms.append(first.ms)
        screen_kb.append(first.bytes / 1e3)
        for k, e in enumerate(events):
            stop_ms[k].append(e.ms)
            stop_kb[k].append(e.bytes / 1e3)
        print(f"  {i:2d}: first screen {first.ms:6.1f} ms {first.bytes / 1e3:6.1f} kB; stops "
              + ", ".join(f"{k + 1}: {e.ms:.0f} ms {e.bytes / 1e3:.0f} kB" for k, e in enumerate(events)), flush=True)
    translate.WATCH_PACE = pace
    app.close()
    figures = [figure("tour.screen.p50_ms", "first screen (translate_stream, pacing excluded): server time p50",
                      stats(screen_ms)["p50"], "ms", "<=", SCREEN_MS),
               figure("tour.screen.max_kb", "first screen: JSON sent, max over sentences", max(screen_kb), "kB",
                      "<=", SCREEN_KB)]
    for k in range(tour.N_STOPS):
        figures += [figure(f"tour.stop{k + 1}.p50_ms", f"stop {k + 1} ({tour.TITLES[k]}): server time p50",
                           stats(stop_ms[k])["p50"], "ms"),
                    figure(f"tour.stop{k + 1}.p95_ms", f"stop {k + 1}: server time p95", stats(stop_ms[k])["p95"], "ms"),
                    figure(f"tour.stop{k + 1}.p50_kb", f"stop {k + 1}: JSON sent p50", stats(stop_kb[k])["p50"], "kB")]
    return entry(figures, model=f"{cfg.checkpoint}, in the app with every model of {cfg.app_root.name}/",
                 data=f"first {len(texts) - 1} lines of Multi30k test_2016_flickr.{name.split('-')[0]} (after one warm-up)",
                 method="in process, Blocks.process_api per frame; one session per sentence: translate, then the "
                        "tour's start and Next through every stop",
                 screen={"ms": stats(screen_ms), "kb": stats(screen_kb)},
                 stops={tour.TITLES[k]: {"ms": stats(stop_ms[k]), "kb": stats(stop_kb[k])} for k in range(tour.N_STOPS)})


if __name__ == "__main__":
    raise SystemExit(standalone("tour", run))
