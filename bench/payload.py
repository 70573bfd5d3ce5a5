"""Bytes the browser receives per interaction, over the wire from a launched app.

``python app.py`` serves the checkpoints folder on 127.0.0.1; for each of the first 20 Multi30k test
sentences a new browser session (``bench.common.Browser``: the front end's queue/join + SSE protocol)
translates it with the UI's defaults (``translate_stream``: the streamed replay and every view of the
first screen), opens the three sections drawn on opening (Generation, Masks & interventions,
Encodings), presses Compare (positional encoding off), then redraws a few views. Counted per event:
every byte of the responses (bodies off the socket, status lines, headers). Not counted: uploads and
the page itself (HTML, JS, ``/config``: once per visit). 1 kB = 1000 bytes. The app's CPU time per event
is read from /proc as well (10 ms ticks).
"""
from __future__ import annotations

import statistics

from .common import AppServer, Browser, entry, figure, sentences, standalone

N, N_QUICK = 20, 5
TARGET_KB = 300.0
EVENTS = {  # in the order a visitor meets them; the inputs each changes, by elem_id
    "translate_stream": {}, "on_replay": {},  # one click: the front end runs the replay when the translate ends
    "open_generation": {}, "open_interventions": {}, "open_computation": {},
    "compare_ui": {"tog-positional": False}, "attention_view": {"attn-kind": "encoder.self_attn"},
    "step_view": {"step-slider": 1}, "compare_maps": {"attn-kind": "decoder.self_attn"},
    "head_computation": {"head-query": 1}, "attribution_view": {"attr-pos": 1}, "forced_view": {},
}


def run(cfg) -> dict:
    name = cfg.direction
    texts = sentences(cfg, name.split("-")[0], N_QUICK if cfg.quick else N)
    refs = sentences(cfg, name.split("-")[1], len(texts))
    kb, cpu = {a: [] for a in EVENTS}, {a: [] for a in EVENTS}
    with AppServer(cfg.app_root) as srv:
        srv.wait_ready()
        b = Browser(srv.url)
        b.event("translate_stream", {"input-text": texts[0], "direction": name})  # warm-up, not counted
        for i, text in enumerate(texts):
            b.session = f"bench{i:06d}"
            for a, values in EVENTS.items():
                c0 = srv.cpu_s()
                kb[a].append(b.event(a, {"input-text": text, "direction": name, "ref-text": refs[i],
                                         **values})["bytes"] / 1e3)
                cpu[a].append((srv.cpu_s() - c0) * 1e3)
            print(f"  {i + 1:2d}: " + ", ".join(f"{a} {kb[a][-1]:.1f}" for a in EVENTS) + " kB", flush=True)
        config_kb = len(b.http.get(srv.url + "config").content) / 1e3
        b.close()
        errors = srv.errors()
    visit = [sum(x) for x in zip(*kb.values())]
    click = [a + b for a, b in zip(kb["translate_stream"], kb["on_replay"])]
    figures = []
    for a, x in kb.items():
        figures += [figure(f"payload.{a}.p50_kb", f"{a}: p50 over sentences", statistics.median(x), "kB"),
                    figure(f"payload.{a}.max_kb", f"{a}: max over sentences", max(x), "kB", "<=", TARGET_KB)]
    figures += [figure("payload.translate_click.max_kb", "a Translate click (translate_stream + its replay): max",
                       max(click), "kB", "<=", TARGET_KB),
                figure("payload.visit.p50_kb", "all of the above in one visit: p50", statistics.median(visit), "kB"),
                figure("payload.visit.max_kb", "all of the above in one visit: max", max(visit), "kB"),
                figure("payload.translate_cpu.p50_ms", "server CPU per translate_stream over HTTP (sleeps cost none): p50",
                       statistics.median(cpu["translate_stream"]), "ms")]
    if errors:
        cfg.notes.append(f"the server logged {len(errors)} error line(s), e.g. {errors[0][:200]}")
    return entry(figures, model=f"`python app.py` serving {cfg.app_root.name}/, direction {name}",
                 data=f"first {len(texts)} lines of Multi30k test_2016_flickr.{name.split('-')[0]}",
                 method="a new session per sentence; per event the join response and the SSE stream, bytes on "
                        "the wire (gzip offered; Gradio does not compress these routes)",
                 summary=f"/config (once per visit) {config_kb:.1f} kB", kb={a: [round(v, 1) for v in x] for a, x in kb.items()},
                 server_cpu_ms={a: round(statistics.median(x)) for a, x in cpu.items()})


if __name__ == "__main__":
    raise SystemExit(standalone("payload", run))
