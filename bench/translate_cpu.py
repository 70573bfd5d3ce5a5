"""Server CPU of one warm ``/translate``, an older tree against today's, side by side in one run.

Each tree runs ``python app.py`` on its own checkpoints folder (one server at a time, on 127.0.0.1), with the
result cache off (``ATTN_CACHE_MB=0``) so that every request is decoded. Once the start-up warm-up has ended
(the server's CPU time stops growing), one gradio_client sends N different test sentences one after another
(de-en, greedy, at most 100 tokens, full precision, as ``predict(text, "de-en", 1, 100, api_name="/translate")``).
The figure is the server's CPU time (user + system, from /proc) over those requests, less what it uses idle
over the same wall time, divided by N. The two
servers alternate for R rounds; the median round is reported. ``--base`` names the older commit (a git
worktree is made for it and removed afterwards); ``--trust`` also times today's server with the trust
signals asked for.
"""
from __future__ import annotations

import statistics
import time
from pathlib import Path

from .common import ROOT, AppServer, entry, figure, sentences, standalone, worktree

BASE = "ed3d274"  # the tree where /translate last cost 97 ms of server CPU
N, ROUNDS = 30, 3


def cpu_rate(server: AppServer, seconds: float) -> float:
    """Cores' worth of CPU the server uses over ``seconds`` of wall time."""
    a = server.cpu_s()
    time.sleep(seconds)
    return (server.cpu_s() - a) / seconds


def settled(server: AppServer, timeout: float = 300) -> float:
    """Wait until the warm-up thread has finished (the server below a tenth of a core), then return the rate
    it keeps using while idle (Gradio's own loops): that is subtracted from the requests' time."""
    t0 = time.perf_counter()
    while cpu_rate(server, 2.0) > 0.1:
        if time.perf_counter() - t0 > timeout:
            raise TimeoutError("the server never went quiet")
    return cpu_rate(server, 10.0)


def cpu_per_request(tree: Path, texts: list[str], extra: tuple = ()) -> float:
    """Milliseconds of server CPU per /translate, over ``texts`` sent one after another (the idle rate over
    the same wall time taken off)."""
    from gradio_client import Client
    with AppServer(tree / "checkpoints", env={"ATTN_CACHE_MB": "0"}, cwd=tree) as server:
        server.wait_ready()
        client = Client(server.url, verbose=False)
        client.predict(texts[0], "de-en", 1, 100, *extra, api_name="/translate")  # the client's first call
        idle = settled(server)
        before, t0 = server.cpu_s(), time.perf_counter()
        for text in texts:
            out = client.predict(text, "de-en", 1, 100, *extra, api_name="/translate")
            assert out.get("output_tokens"), out
        used = server.cpu_s() - before - idle * (time.perf_counter() - t0)
        return 1000 * used / len(texts)


def run(cfg, base: str = BASE, trust: bool = False):
    texts = sentences(cfg, "de", N)[1:] if not cfg.quick else sentences(cfg, "de", 8)[1:]
    with worktree(base) as old:
        trees = {"old": old, "new": ROOT} | ({"new_trust": ROOT} if trust else {})
        rounds = {k: [] for k in trees}
        for _ in range(1 if cfg.quick else cfg.reps or ROUNDS):
            for k, tree in trees.items():
                rounds[k].append(cpu_per_request(tree, texts, (None, True) if k == "new_trust" else ()))
    med = {k: statistics.median(v) for k, v in rounds.items()}
    figs = [figure("translate_cpu.old_ms", f"server CPU per warm /translate at {base} (median of rounds)",
                   med["old"], "ms"),
            figure("translate_cpu.new_ms", "server CPU per warm /translate today (median of rounds)", med["new"],
                   "ms", "<=", med["old"] * 1.05)]
    if trust:
        figs.append(figure("translate_cpu.trust_ms", "today, with trust=True (median of rounds)",
                           med["new_trust"], "ms"))
    return entry(figs, rounds_ms={k: [round(x, 1) for x in v] for k, v in rounds.items()}, requests=len(texts),
                 base=base)


OPTIONS = {"--base": dict(default=BASE, help="the older commit to compare with"),
           "--trust": dict(action="store_true", help="also time today's server with trust=True")}

if __name__ == "__main__":
    raise SystemExit(standalone("translate_cpu", run, options=OPTIONS))
