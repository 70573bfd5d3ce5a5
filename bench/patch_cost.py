"""What each of ui/overhead.py's patches of Gradio still saves a new visitor, on today's page.

One server per variant (``python app.py`` on the shipped checkpoints), all started together: every patch on;
``ATTN_GRADIO_PATCHES=0`` (all off); and each patch alone left off (the app started with that one step of
``overhead.pay_once`` replaced by nothing). Once each has settled, a new visitor opens a shared link: ``GET /``,
then the page's load event (``deep_link``, which draws the first screen from the link: the event with the most
outputs a visitor meets), then the first screen's Translate event (``/translate_stream``), each over the queue
in a session of its own, the same sentence every time (answered from the result cache, as a class opening one
link is). Server CPU per visitor (user + system, the
idle rate taken off), N visitors a round, the variants taking turns round by round; the figure is the median
over rounds, and each patch's saving is (its variant's CPU − all on) / its variant's CPU.
"""
from __future__ import annotations

import json
import statistics
import sys
import time
import urllib.request
import uuid
from urllib.parse import urlencode

from .common import ROOT, AppServer, entry, figure, standalone
from .serving import LeanClient
from .translate_cpu import settled

TEXT = "Ein Mann fährt Fahrrad auf einer belebten Straße."
N, ROUNDS = 10, 3
# pay_once's steps, by the name each is reached through when pay_once calls it
# (kept schemas and bokeh marked absent were measured here too, at 0.5 % and 1.2 %, and dropped)
PATCHES = {"signatures": "overhead.remember_signatures", "session_configs": "overhead.share_session_configs",
           "skips": "overhead.pass_over_skips", "file_walks": "overhead.skip_fileless_walks",
           "monitoring": "settings.summarise_monitoring_rarely"}


class PatchedServer(AppServer):
    """``python app.py`` with one of pay_once's steps replaced by nothing (``target``: "module.function")."""

    def __init__(self, root, target: str | None = None, env: dict | None = None):
        super().__init__(root, env)
        self.target = target

    def __enter__(self):
        import os
        import subprocess
        import threading
        env = dict(os.environ, ATTN_CHECKPOINTS=str(self.root), ATTN_DEVICE="cpu", GRADIO_SERVER_NAME="127.0.0.1",
                   GRADIO_SERVER_PORT=str(self.port), GRADIO_ANALYTICS_ENABLED="False", PYTHONUNBUFFERED="1",
                   **self.extra_env)
        off = ""
        if self.target:
            module, name = self.target.split(".")
            off = f"from ui import {module} as m; setattr(m, {name!r}, lambda *a, **k: None); "
        code = off + "import app; app.main()"
        self.t0 = time.perf_counter()
        self.proc = subprocess.Popen([sys.executable, "-c", code], cwd=self.cwd, env=env, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        threading.Thread(target=self._drain, daemon=True).start()
        return self


class LinkLoad:
    """The page's load event for a visitor of a link: a join POST with the link as the Referer, then the event
    stream read to its end (gradio_client's payload, state inputs filled in, built once)."""

    def __init__(self, url: str):
        import httpx
        from gradio_client import Client
        c = Client(url, verbose=False, download_files=False)
        ep = next(e for e in c.endpoints.values() if e.api_name == "/deep_link")
        self.fn_index, self.data = ep.fn_index, list(ep.insert_empty_state(1440))
        self.join_url, self.data_url = c.sse_data_url, c.sse_url
        self.referer = url + "?" + urlencode({"text": TEXT, "model": "de-en"})
        self.http = httpx.Client(timeout=300)

    def request(self) -> None:
        session = uuid.uuid4().hex[:11]
        body = {"data": self.data, "fn_index": self.fn_index, "session_hash": session, "event_data": None,
                "trigger_id": None}
        self.http.post(self.join_url, json=body, headers={"referer": self.referer}).raise_for_status()
        with self.http.stream("GET", self.data_url, params={"session_hash": session}) as r:
            for line in r.iter_lines():
                if line.startswith("data:") and '"process_completed"' in line:
                    if not json.loads(line[5:]).get("success"):
                        raise ValueError(f"the link's load event failed: {line[:200]}")
                    return
        raise ValueError("the event stream ended without a result")


def visitor(server: AppServer, clients: tuple) -> None:
    load, translate = clients
    with urllib.request.urlopen(server.url, timeout=60) as r:
        assert len(r.read()) > 1000
    load.request()
    translate.request(TEXT, "de-en")


def per_visitor_ms(server, client, idle: float, n: int) -> float:
    before, t0 = server.cpu_s(), time.perf_counter()
    for _ in range(n):
        visitor(server, client)
    return 1000 * (server.cpu_s() - before - idle * (time.perf_counter() - t0)) / n


def variants() -> dict:
    out = {"all_on": PatchedServer(ROOT / "checkpoints"),
           "all_off": PatchedServer(ROOT / "checkpoints", env={"ATTN_GRADIO_PATCHES": "0"})}
    out |= {f"no_{k}": PatchedServer(ROOT / "checkpoints", target) for k, target in PATCHES.items()}
    return out


def run(cfg):
    n, rounds = (3, 1) if cfg.quick else (N, cfg.reps or ROUNDS)
    servers = variants()
    for s in servers.values():
        s.__enter__()
    try:
        for s in servers.values():
            s.wait_ready(600)
        clients, idle = {}, {}
        for k, s in servers.items():
            clients[k] = (LinkLoad(s.url), LeanClient(s.url))
            visitor(s, clients[k])  # the sentence decoded once, cached for the rounds
        for k, s in servers.items():
            idle[k] = settled(s)
        samples = {k: [] for k in servers}
        for _ in range(rounds):
            for k, s in servers.items():
                samples[k].append(per_visitor_ms(s, clients[k], idle[k], n))
    finally:
        for s in servers.values():
            s.__exit__(None, None, None)
    med = {k: statistics.median(v) for k, v in samples.items()}
    figs = [figure(f"patch_cost.{k}", f"server CPU of a new visitor, {k.replace('_', ' ')}", v, "ms")
            for k, v in med.items()]
    for k in PATCHES:
        saving = 100 * (med[f"no_{k}"] - med["all_on"]) / med[f"no_{k}"]
        figs.append(figure(f"patch_cost.saving.{k}", f"what the {k} patch saves a new visitor", saving, "%"))
    figs.append(figure("patch_cost.saving.all", "what all patches save a new visitor",
                       100 * (med["all_off"] - med["all_on"]) / med["all_off"], "%"))
    return entry(figs, visitors_per_round=n, rounds=rounds, raw={k: [round(x, 2) for x in v]
                                                                    for k, v in samples.items()})


if __name__ == "__main__":
    raise SystemExit(standalone("patch_cost", run))
