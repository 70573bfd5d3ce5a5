"""The trust signals: what they add to a Translate click, and how well they separate failed translations.

Cost, in process, for the first 20 Multi30k test sentences (5 with --quick) of the timed model: the
first screen's event (``translate_stream``: the decode and every view, through Gradio's processing)
with the trust panel and with the panel replaced by an empty string, interleaved, the result cache
cleared before every event (a first click on a new sentence); the signals alone (one run's report,
uncached) and ALTI+'s share of them; the bytes the panel adds to the event and the ``trust`` field
adds to /translate's JSON; ALTI+ and the step entropies on an OPUS-MT-sized random model (d 512, 6 + 6
layers, a 58,101-token vocabulary). p50 over sentences of the median of the repetitions. The first screen is judged
in the process's CPU time: on the shared 2-core machine other processes stretch the wall clock.

The table: each signal's AUROC and precision at 90 % recall per direction, recomputed from the shipped
per-item scores (checkpoints/trust/scores.jsonl.gz, written by ``python -m model.trust``, which decodes the
labelled set; see docs/trust.md).
"""
from __future__ import annotations

import json
import statistics
import time

from .common import InProcessApp, entry, figure, model, sentences, standalone, stats

N, N_QUICK = 20, 5
TARGET_MS, TARGET_KB = 150.0, 300.0


def _cpu_ms(fn) -> float:
    c0 = time.thread_time()
    fn()
    return (time.thread_time() - c0) * 1e3


def signal_costs(cfg, texts: list[str]) -> tuple[list[float], list[float]]:
    """Thread CPU ms per sentence: the whole report, and ALTI+ within it."""
    from model.analysis.attribution import alti_matrices
    from model.analysis.computation import Computation
    from model.engine.decoding import translate
    from model.analysis.trust_signals import trust_report
    lm = model(cfg)
    whole, alti = [], []
    for text in texts:
        tr = translate(lm, text)
        whole.append(statistics.median(_cpu_ms(lambda: trust_report(lm, tr)) for _ in range(3)))
        alti.append(statistics.median(_cpu_ms(lambda: alti_matrices(Computation(tr.trace, lm.model)))
                                      for _ in range(3)))
    return whole, alti


def screen(cfg, texts: list[str], reps: int) -> dict:
    """First-screen event with and without the panel: wall ms, process CPU ms, bytes (median of reps)."""
    from ui import calls
    from ui.present import trust
    app = InProcessApp(cfg)
    real = trust.panel
    out = {k: [] for k in ("with_ms", "without_ms", "with_cpu", "without_cpu", "with_kb", "without_kb")}
    try:
        for i, text in enumerate(texts):
            v = {"input-text": text, "direction": cfg.direction}
            rounds = {k: [] for k in out}
            for r in range(reps):
                for variant in (("with", "without") if r % 2 == 0 else ("without", "with")):
                    trust.panel = real if variant == "with" else (lambda reg_key, run: "")
                    calls.RESULTS.clear()
                    e = app.event(app.session(), "translate_stream", v)
                    rounds[f"{variant}_ms"].append(e.ms)
                    rounds[f"{variant}_cpu"].append(e.cpu_ms)
                    rounds[f"{variant}_kb"].append(e.bytes / 1e3)
            for k in out:
                out[k].append(statistics.median(rounds[k]))
            print(f"  {i + 1:2d}: with {out['with_ms'][-1]:.1f} ms, without {out['without_ms'][-1]:.1f} ms", flush=True)
    finally:
        trust.panel = real
        app.close()
    return out


def marian_sized() -> list[dict]:
    """Thread CPU ms of ALTI+ and of the step entropies on an OPUS-MT-sized random model (bench.marian):
    what the signals cost an added OPUS-MT model, 20 -> 20 and 40 -> 40 tokens."""
    import torch

    from model.analysis.attribution import alti_matrices
    from model.analysis.computation import Computation
    from model.engine.hooks import capture
    from model.analysis.trust_signals import entropies
    from .marian import build
    model, _ = build()
    g, figs = torch.Generator().manual_seed(1), []
    for n in (20, 40):
        src, dec = (torch.randint(2, 58000, (1, k), generator=g) for k in (n + 1, n))
        with torch.inference_mode(), capture(model) as trace:
            model(src, dec)

        def ent():
            with torch.inference_mode():
                entropies(model.logits(trace["decoder.hook_norm"][0]).float().log_softmax(-1))
        a = statistics.median(_cpu_ms(lambda: alti_matrices(Computation(trace, model))) for _ in range(3))
        e = statistics.median(_cpu_ms(ent) for _ in range(3))
        figs += [figure(f"trust.marian{n}.alti_ms", f"OPUS-MT-sized model, {n} → {n} tokens: ALTI+", a, "ms"),
                 figure(f"trust.marian{n}.entropy_ms", f"OPUS-MT-sized model, {n} → {n} tokens: step entropies", e,
                        "ms")]
    return figs


def api_bytes(cfg, texts: list[str]) -> list[float]:
    from model.engine.decoding import translate
    from model.analysis.trust_signals import trust_report
    from ui.present.trust import trust_payload
    lm = model(cfg)
    return [len(json.dumps(trust_payload(trust_report(lm, translate(lm, t))))) / 1e3 for t in texts]


def table_figures() -> tuple[list[dict], str]:
    from model.analysis import trust_eval as te
    from model.analysis import trust_set as ts
    from model.trust import SCORES
    from model.analysis.trust_signals import INFO, NUMERIC
    scored = te.load_scores(SCORES, ts.load_set())
    figs = []
    for d in ts.DIRECTIONS:
        for r in te.rows(scored, d):
            figs += [figure(f"trust.{d}.{r.signal}.auroc", f"{d}: {INFO[r.signal].label}: AUROC", r.auroc, ""),
                     figure(f"trust.{d}.{r.signal}.p90", f"{d}: {INFO[r.signal].label}: precision at 90 % recall",
                            r.precision_at_90, "")]
    fails = {d: sum(s.failure for s in scored if s.item.direction == d) for d in ts.DIRECTIONS}
    return figs, f"failures per direction (of {len(scored) // len(ts.DIRECTIONS)} items): {fails}"


def run(cfg) -> dict:
    texts = sentences(cfg, cfg.direction.split("-")[0], N_QUICK if cfg.quick else N)
    whole, alti = signal_costs(cfg, texts)
    sc = screen(cfg, texts, cfg.reps or (2 if cfg.quick else 4))
    st = {k: stats(v) for k, v in sc.items()}
    api = stats(api_bytes(cfg, texts))
    figs = [
        figure("trust.signals.p50_ms", "the signals of one run (uncached, thread CPU): p50", stats(whole)["p50"], "ms"),
        figure("trust.signals.p95_ms", "the signals of one run: p95", stats(whole)["p95"], "ms"),
        figure("trust.alti.p50_ms", "of which ALTI+ (every output position at once): p50", stats(alti)["p50"], "ms"),
        figure("trust.screen_with_cpu.p50_ms", "first screen with the trust panel, cache cleared, process CPU: "
               "p50", st["with_cpu"]["p50"], "ms", "<=", TARGET_MS),
        figure("trust.screen_without_cpu.p50_ms", "first screen without it (panel empty), process CPU: p50",
               st["without_cpu"]["p50"], "ms"),
        figure("trust.screen_with.p50_ms", "first screen with the trust panel, wall clock: p50", st["with_ms"]["p50"],
               "ms"),
        figure("trust.screen_without.p50_ms", "first screen without it, wall clock: p50", st["without_ms"]["p50"],
               "ms"),
        figure("trust.screen_cpu_added.p50_ms", "process CPU the panel adds to the first screen: p50",
               statistics.median(a - b for a, b in zip(sc["with_cpu"], sc["without_cpu"])), "ms"),
        figure("trust.screen_with.max_kb", "first screen's JSON with the panel: max over sentences",
               st["with_kb"]["max"], "kB", "<=", TARGET_KB),
        figure("trust.screen_added.max_kb", "JSON the panel adds: max",
               max(a - b for a, b in zip(sc["with_kb"], sc["without_kb"])), "kB"),
        figure("trust.api.max_kb", "the `trust` field of /translate's JSON: max", api["max"], "kB"),
    ]
    table, summary = table_figures()
    return entry(figs + marian_sized() + table, model=cfg.checkpoint, data=cfg.data,
                 method=__doc__.split("\n\n")[1].replace("\n", " "), summary=summary)


if __name__ == "__main__":
    raise SystemExit(standalone("trust", run))
