"""A class opening one shared link: 40 clients within 5 s, then 40 at the same instant.

Three servers side by side, same machine, same clients, one run (``python app.py`` driven by gradio_client):
``nocache``: no result cache, no batching, one event at a time (the code before the result cache);
``cache``: the result cache, but the page's model events still one at a time (ATTN_EVENT_CONCURRENCY=1);
``slots``: the defaults: up to ATTN_EVENT_CONCURRENCY events at once, of which ATTN_MODEL_CONCURRENCY run the
model (calls.model_slot), so a client answered from the cache does not queue behind the others.
Each client asks for the whole first screen (the UI's Translate event). Goal: p95 <= 1.5 s, one decode.
The clients run here too, on the server's two cores: gradio_client ones (~50 ms of CPU a call in one
process, as earlier runs measured) and lean ones (a join POST and the event stream, nothing else; the goal
is read on these, a class's browsers having machines of their own). Each phase reports both sides' CPU.
"""
from __future__ import annotations

import time

from .common import entry, figure, standalone
from .serving import LeanClient, classroom, served, ui_request

VARIANTS = {"nocache": {"ATTN_CACHE_MB": "0", "ATTN_BATCH": "1", "ATTN_EVENT_CONCURRENCY": "1"},
            "cache": {"ATTN_EVENT_CONCURRENCY": "1"}, "slots": {}}
TEXT = "Ein Mann fährt Fahrrad auf einer belebten Straße."
N = 40


PHASES = {  # (clients, within s, sentence): each phase its own sentence, so each starts with one decode to do
    "spread": ("gradio_client", 5.0, TEXT), "instant": ("gradio_client", 0.0, "Eine Frau liest ein Buch im Park."),
    "lean_spread": ("lean", 5.0, "Ein Hund rennt über eine grüne Wiese."),
    "lean_instant": ("lean", 0.0, "Zwei Kinder spielen am Strand.")}


def variant(cfg, name: str) -> dict:
    from gradio_client import Client
    with served(cfg, VARIANTS[name]) as srv:
        pools = {"gradio_client": [Client(srv.url, verbose=False, download_files=False) for _ in range(N)],
                 "lean": [LeanClient(srv.url) for _ in range(N)]}
        ui_request(pools["gradio_client"][0], "Zwei Hunde spielen im Schnee.", "de-en")  # warm-up: another sentence
        out = {}
        for phase, (kind, within, text) in PHASES.items():
            out[phase] = classroom(srv, pools[kind], text, "de-en", within=within)
            print(f"  {name}: {phase}: {out[phase]}", flush=True)
            time.sleep(2)
    return out


def run(cfg) -> dict:
    res = {name: variant(cfg, name) for name in VARIANTS}
    figures = []
    for name, r in res.items():
        for phase, (kind, within, _) in PHASES.items():
            p = r[phase]
            label = f"40 {'at once' if within == 0 else f'within {within:.0f} s'}, {kind} clients"
            goal = ("<=", 1.5) if name == "slots" and kind == "lean" else (None, None)
            figures += [figure(f"classroom.{name}.{phase}.p50_s", f"{name}: {label}, p50", p["p50_s"], "s"),
                        figure(f"classroom.{name}.{phase}.p95_s", f"{name}: {label}, p95", p["p95_s"], "s", *goal),
                        figure(f"classroom.{name}.{phase}.decodes", f"{name}: {label}, decodes that ran",
                               p["model_calls"], ""),
                        figure(f"classroom.{name}.{phase}.errors", f"{name}: {label}, errors", p["errors"], "",
                               "<=", 0),
                        figure(f"classroom.{name}.{phase}.server_cpu_ms", f"{name}: {label}, server CPU per client",
                               1e3 * p["server_cpu_s"] / N, "ms"),
                        figure(f"classroom.{name}.{phase}.clients_cpu_s", f"{name}: {label}, the clients' CPU "
                               "(on the same cores)", p["clients_cpu_s"], "s")]
    return entry(figures, model=f"`python app.py` serving {cfg.app_root.name}/", variants=VARIANTS,
                 method="gradio_client clients and lean ones (a join POST and the event stream, nothing else) "
                        "on the same 2 cores; the UI's Translate event", results=res)


if __name__ == "__main__":
    raise SystemExit(standalone("classroom", run))
