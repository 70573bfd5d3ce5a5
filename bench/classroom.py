"""A class opening one shared link: 40 clients within 5 s, then 40 at the same instant.

Three servers side by side, same machine, same clients, one run (``python app.py`` driven by gradio_client):
``nocache``: no result cache, no batching, one event at a time (the code before the result cache);
``cache``: the result cache, but the page's model events still one at a time (ATTN_EVENT_CONCURRENCY=1);
``slots``: the defaults: up to ATTN_EVENT_CONCURRENCY events at once, of which ATTN_MODEL_CONCURRENCY run the
model (calls.model_slot), so a client answered from the cache does not queue behind the others.
Each client asks for the whole first screen (the UI's Translate event). Goal: p95 <= 1.5 s, one decode.
"""
from __future__ import annotations

import time

from .common import entry, figure, standalone
from .serving import classroom, served, ui_request

VARIANTS = {"nocache": {"ATTN_CACHE_MB": "0", "ATTN_BATCH": "1", "ATTN_EVENT_CONCURRENCY": "1"},
            "cache": {"ATTN_EVENT_CONCURRENCY": "1"}, "slots": {}}
TEXT = "Ein Mann fährt Fahrrad auf einer belebten Straße."
N = 40


def variant(cfg, name: str) -> dict:
    from gradio_client import Client
    with served(cfg, VARIANTS[name]) as srv:
        clients = [Client(srv.url, verbose=False, download_files=False) for _ in range(N)]
        ui_request(clients[0], "Zwei Hunde spielen im Schnee.", "de-en")  # warm-up: another sentence
        out = {"spread": classroom(srv, clients, TEXT, "de-en")}
        print(f"  {name}: 40 within 5 s: {out['spread']}", flush=True)
        time.sleep(2)
        out["instant"] = classroom(srv, clients, "Eine Frau liest ein Buch im Park.", "de-en", within=0)
        print(f"  {name}: 40 at once: {out['instant']}", flush=True)
    return out


def run(cfg) -> dict:
    res = {name: variant(cfg, name) for name in VARIANTS}
    figures = []
    for name, r in res.items():
        for phase, label in (("spread", "40 within 5 s"), ("instant", "40 at once")):
            p = r[phase]
            goal = ("<=", 1.5) if name == "slots" else (None, None)
            figures += [figure(f"classroom.{name}.{phase}.p50_s", f"{name}: {label}, p50", p["p50_s"], "s"),
                        figure(f"classroom.{name}.{phase}.p95_s", f"{name}: {label}, p95", p["p95_s"], "s", *goal),
                        figure(f"classroom.{name}.{phase}.decodes", f"{name}: {label}, decodes that ran",
                               p["model_calls"], ""),
                        figure(f"classroom.{name}.{phase}.errors", f"{name}: {label}, errors", p["errors"], "",
                               "<=", 0)]
    return entry(figures, model=f"`python app.py` serving {cfg.app_root.name}/", variants=VARIANTS,
                 method="gradio_client clients on the same 2 cores; the UI's Translate event", results=res)


if __name__ == "__main__":
    raise SystemExit(standalone("classroom", run))
