"""Analysis › Two models: server time and bytes of the second model beside the run.

For the first 20 test sentences (5 with --quick): en-de's run is on screen (decoded untimed, as the first
screen would have it), and en-fr (the other shipped model that reads English) is the second model: its decode
with the run's options, both per-head grids (cross-attention), the row-by-row table, each side's trust signals
(its panel read against its own model's validation reference), and their JSON. The AER panels need a
validation sentence with a gold alignment and are left out here (test sentences have none). Thread CPU time
(one torch thread) and wall time, p50 and max, with the trust signals' share; bytes = the table, both trust
panels and both figures' JSON.
"""
from __future__ import annotations

import statistics
import time

from model.analysis.trust_signals import trust_report
from model.engine.decoding import DecodeOptions, translate
from model.families import load_all
from ui.present import sidebyside as sbs
from ui.present.trust import trust_markdown
from ui.state import Run, Selection

from .common import ROOT, entry, figure, sentences, standalone

FIRST, SECOND = "en-de", "en-fr"


def cost(reg, run: Run, sel: Selection) -> tuple[float, float, int, float]:
    """(wall ms, thread CPU ms, bytes, thread CPU ms of the two trust panels) of one sentence's view."""
    t0, c0 = time.perf_counter(), time.thread_time()
    lm = reg.models[SECOND]
    other = Run.of(lm, SECOND, translate(lm, run.tr.src_text, DecodeOptions()))
    md = sbs.markdown(reg, run, other)
    c1 = time.thread_time()
    panels = [trust_markdown(trust_report(reg.models[r.model], r.tr)) for r in (run, other)]
    trust_cpu = (time.thread_time() - c1) * 1e3
    figs = [sbs.grid_figure(reg, run, sel, reg.models[FIRST], "This run").to_json(),
            sbs.grid_figure(reg, other, sel, lm, "Second model").to_json()]
    size = len(md.encode()) + sum(len(x.encode()) for x in (*panels, *figs))
    return (time.perf_counter() - t0) * 1e3, (time.thread_time() - c0) * 1e3, size, trust_cpu


def run(cfg) -> dict:
    reg = load_all(ROOT / "checkpoints", "cpu")
    texts = sentences(cfg, "en", 5 if cfg.quick else 20)
    sel = Selection(section="analysis", subview="sidebyside")
    runs = [Run.of(reg.models[FIRST], FIRST, translate(reg.models[FIRST], t, DecodeOptions())) for t in texts]
    cost(reg, runs[0], sel)  # warm-up, untimed
    walls, cpus, sizes, trust_cpus = zip(*(cost(reg, r, sel) for r in runs))
    figures = [figure("sidebyside.p50_cpu_ms", f"Two models ({FIRST} beside {SECOND}): server CPU p50",
                      statistics.median(cpus), "ms"),
               figure("sidebyside.max_cpu_ms", "Two models: server CPU max", max(cpus), "ms"),
               figure("sidebyside.p50_ms", "Two models: wall p50", statistics.median(walls), "ms"),
               figure("sidebyside.trust_p50_cpu_ms", "Two models: both sides' trust signals, CPU p50",
                      statistics.median(trust_cpus), "ms"),
               figure("sidebyside.bytes_max", "Two models: bytes max", max(sizes) / 1e3, "kB")]
    return entry(figures, data=f"first {len(texts)} test_2016_flickr sentences", method="in process, one torch "
                 "thread; the second model's decode, both trust panels, both grids and the table, with their JSON")


if __name__ == "__main__":
    raise SystemExit(standalone("sidebyside", run))
